"""The server's counters in the store's stats (``cascade stats``, ``server`` section).

They are kept as counters of a ``server`` pseudo-tier in the same table as the tiers' and merged
into the index after every request, so a running server's figures show in `cascade stats`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from cascade_cli.prompts.block_index import PREFIX
from cascade_cli.prompts.types import Result
from cascade_cli.store import DiskStore

log = logging.getLogger("cascade.serve")

SECTION = "server"
#: requests answered (or failed); errors among them; prompt tokens not decoded (cache_n);
#: prompt tokens decoded (prompt_n); tokens generated.
NAMES = ("requests", "errors", "cached_tokens", "prompt_tokens", "generated_tokens")
#: Latency histogram of the time to the first token.
TTFT_OP = "server_ttft"


def recorder(disk: DiskStore) -> Callable[[Result | None, bool], None]:
    """The worker's hook after every request: count a failure and merge the counters into the
    index, so a running server's figures show in `cascade stats`.

    The prompt service counts each reply it streams (requests, cached/decoded prompt tokens,
    generated tokens, the ``server_ttft`` histogram); a request that failed before it had a
    reply (bad input, a prompt that does not fit) is counted here."""

    def record(result: Result | None, failed: bool) -> None:
        if failed:
            if result is None:
                disk.stats.add(SECTION, "requests")
            disk.stats.add(SECTION, "errors")
        try:
            disk.flush()
        except Exception as exc:  # stats must never fail a request
            log.warning("could not save the server's stats: %s", exc)

    return record


def section(tiers: dict[str, dict[str, int]]) -> dict[str, int]:
    """Take the server's counters out of a stats snapshot's tiers (zeros when none)."""
    found = tiers.pop(SECTION, {})
    return {name: int(found.get(name, 0)) for name in NAMES}


def stored(by_owner: dict[str, dict[str, Any]]) -> dict[str, int]:
    """The prompt blocks the store holds for the server (chunks of ``api:`` owners)."""
    mine = [o for name, o in by_owner.items() if name.startswith(PREFIX)]
    return {
        "blocks": sum(int(o.get("chunks", 0)) for o in mine),
        "bytes": sum(int(o.get("bytes", 0)) for o in mine),
    }


def summary(data: dict[str, Any]) -> str:
    """One line for `cascade stats`."""
    s = {"blocks": 0, "bytes": 0, **(data.get(SECTION) or dict.fromkeys(NAMES, 0))}
    return (
        f"server: {s['requests']} requests ({s['errors']} failed) · prompt tokens "
        f"{s['cached_tokens']} cached, {s['prompt_tokens']} decoded · "
        f"{s['generated_tokens']} generated · {s['blocks']} prompt blocks stored "
        f"({s['bytes'] / 2**20:.1f} MiB)"
    )
