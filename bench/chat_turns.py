"""What paging costs a chat turn, and whether memory stays flat over a long conversation.

python bench/chat_turns.py cost [--turns 50] [--window 4096]
python bench/chat_turns.py rss [--turns 200] [--window 4096]

cost: one in-process session, greedy, messages about passages of *Emma* (≈ 330 tokens a turn
with the reply), so 50 turns fill a 4096-token window about four times. For every turn it
records the time to first token and its parts: recall (search), layout (drops and inserts in
the window), and the K-shift llama.cpp applies on the next decode after cells moved — made
explicit by decoding one token in the scratch sequence right after the layout change, minus
the same one-token decode once nothing is pending. Paging's added cost per turn is recall +
layout + that K-shift; medians over the turns that paged (a turn left or a chunk came in).

rss: 200 turns (≈ 230 tokens each with --chars 800: the window is full by turn 20, 200 turns
are ≈ 11 windows) in one process; VmRSS after turns 20, 50, 100, 150 and 200.

Each mode's summary goes to
bench/results/chat-turns-<cost|rss>-<window>[-<N>chars][-<model>].json (bench/provenance.py).
Needs no earlier run: the store is a temporary directory.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.chat_common import MODEL, filler, model_tag  # noqa: E402
from bench.provenance import save  # noqa: E402
from cascade_cli.config import resolve  # noqa: E402
from cascade_cli.documents.library import Library  # noqa: E402
from cascade_cli.engine import Context, Model, set_verbose  # noqa: E402
from cascade_cli.engine.live import SCRATCH_SEQ  # noqa: E402
from cascade_cli.registry import resolve_model  # noqa: E402
from cascade_cli.session.chat import ChatSession  # noqa: E402
from cascade_cli.window import pages as pages_mod  # noqa: E402
from cascade_cli.window.page import Placed  # noqa: E402

PROBES: list[tuple[float, float]] = []


def _probe(ctx: Context) -> float:
    t = time.perf_counter()
    ctx.decode([198], 0, SCRATCH_SEQ, logits="none")
    ctx.seq_rm(SCRATCH_SEQ)
    return time.perf_counter() - t


def instrument() -> None:
    """After every layout change, pay the pending K-shift in a timed one-token probe."""
    original = pages_mod.Pages.apply

    def apply(
        self: pages_mod.Pages,
        target: Any,
        room: int = 0,
        stash: bool | None = None,
        stop: Any = None,
        counted: bool = True,
    ) -> Placed:
        done = original(self, target, room, stash, stop, counted)
        shifted = _probe(self.ctx)
        PROBES.append((shifted, _probe(self.ctx)))
        return done

    pages_mod.Pages.apply = apply  # type: ignore[method-assign]


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def session(ctx: Context, lib: Library, max_tokens: int) -> ChatSession:
    overrides = {"temperature": 0.0, "max_tokens": max_tokens}
    return ChatSession(ctx, lib, "bench", overrides=overrides)


def cost(args: argparse.Namespace, ctx: Context, lib: Library) -> None:
    instrument()
    chat = session(ctx, lib, 32)
    rows = []
    for i, msg in enumerate(filler(args.turns, seed=7)):
        PROBES.clear()
        t0 = time.perf_counter()
        stream = chat.send(msg)
        next(stream)
        first = time.perf_counter() - t0
        for _ in stream:
            pass
        chat.sync()
        last = chat.last
        shift, base = PROBES[-1]
        moved = last.paged_out > 0 or last.paged_in > 0
        added = last.recall_s + last.layout_s + max(0.0, shift - base)
        rows.append((i + 1, first, last.recall_s, last.layout_s, shift - base, added, moved))
        print(
            f"turn {i + 1}: ttft {first:.3f}s recall {last.recall_s * 1e3:.1f} ms layout "
            f"{last.layout_s * 1e3:.1f} ms k-shift {(shift - base) * 1e3:.1f} ms "
            f"prefill {last.prefill_s * 1e3:.0f} ms ({last.prefill_tokens} tok) "
            f"out {last.paged_out} in {last.paged_in} recalled {last.recalled} window {chat.pages.win.end}",
            flush=True,
        )
    chat.close()
    paged = [r for r in rows if r[6]]
    total = chat.s.tokens
    table = []
    for label, sel in (("paging turns", paged), ("all turns", rows)):
        if not sel:
            continue
        med = [statistics.median(r[k] for r in sel) for k in (1, 2, 3, 4, 5)]
        table.append([f"{label} ({len(sel)})", f"{med[0]:.3f}", f"{med[1] * 1e3:.1f}",
                      f"{med[2] * 1e3:.1f}", f"{med[3] * 1e3:.1f}", f"**{med[4] * 1e3:.1f}**",
                      f"{max(r[5] for r in sel) * 1e3:.1f}"])  # fmt: skip
    save(
        f"chat-turns-cost-{args.window}{model_tag()}",
        topic="chat",
        title=f"What paging adds to a chat turn (window {args.window}, {MODEL.name})",
        target="median added cost per paging turn (recall + layout + K-shift) ≤ 150 ms",
        columns=["turns", "median TTFT s", "median recall ms", "median layout ms",
                 "median K-shift ms", "median added ms", "max added ms"],
        rows=table,
        models=args.models,
        notes=f"{args.turns} turns in one in-process session, {total} tokens = "
        f"{total / args.window:.1f} windows, {len(paged)} turns paged; greedy, replies ≤ 32 "
        f"tokens, {args.threads} thread(s). Added = recall + layout + the K-shift paid by a "
        "one-token probe decode right after the layout change, minus the same probe once "
        "nothing is pending.",
    )  # fmt: skip


def rss(args: argparse.Namespace, ctx: Context, lib: Library) -> None:
    chat = session(ctx, lib, 16)
    msgs = filler(args.turns, seed=11, chars=args.chars)
    marks = {20, 50, 100, 150, args.turns}
    seen: dict[int, float] = {}
    table: list[list[object]] = []
    for i, msg in enumerate(msgs):
        for _ in chat.send(msg):
            pass
        chat.sync()
        if i + 1 in marks:
            seen[i + 1] = rss_mib()
            print(f"turn {i + 1}: RSS {seen[i + 1]:.1f} MiB, RAM tier {lib.ram.nbytes / 2**20:.1f}"
                  f" MiB, {chat.s.tokens} tokens", flush=True)  # fmt: skip
            table.append([i + 1, chat.s.tokens, f"{seen[i + 1]:.1f}",
                          f"{lib.ram.nbytes / 2**20:.1f}"])  # fmt: skip
    chat.close()
    first = min(seen)  # turn 20, or the last turn when there are fewer
    save(
        f"chat-turns-rss-{args.window}"
        + ("" if args.chars == 800 else f"-{args.chars}chars")
        + model_tag(),
        topic="chat",
        title=f"Memory over {args.turns} chat turns in one process (window {args.window}, "
        f"{MODEL.name})",
        target="VmRSS after the last turn within 10 % of after turn 20",
        columns=["after turn", "tokens so far", "VmRSS MiB", "RAM tier MiB"],
        rows=table,
        models=args.models,
        notes=f"RSS after turn {args.turns} vs after turn {first}: "
        f"**{seen[args.turns] / seen[first] - 1:+.1%}**. One process, messages of ≈ "
        f"{args.chars} characters about passages of Emma, greedy, replies ≤ 16 tokens, "
        f"{args.threads} thread(s).",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("what", choices=["cost", "rss"])
    ap.add_argument("--turns", type=int)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--chars", type=int, default=800, help="rss: characters of each message")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    args.turns = args.turns or (50 if args.what == "cost" else 200)
    set_verbose(False)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = resolve(
            {"gpu_cache_size": args.window, "disk_cache_path": tmp, "threads": args.threads}
        )
        model = Model(MODEL)
        with (
            Context(model, args.window + 256, 4, 512, cfg.n_threads) as ctx,
            Library(cfg, ctx) as lib,
        ):
            # the generator and recall's embedding model (as Library resolved it)
            embed = [resolve_model(cfg.embed_model, pull=False)] if lib.embedder_factory else []
            args.models = [MODEL, *embed]
            (cost if args.what == "cost" else rss)(args, ctx, lib)


if __name__ == "__main__":
    main()
