"""One `cascade chat` per session: a lock file per session name under the store.

Two terminals writing the same session would interleave turns and overwrite each other's
layout, so a chat holds ``<store>/session-locks/<hash of the name>.lock`` (the store's flock
mechanism, store/lock.py) for its whole run; `rm --session` takes it too. The kernel drops it
when the process exits or crashes, so a lock is never left behind.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from cascade_cli.store.lock import StoreLock

DIR = "session-locks"


def lock_session(store: Path, name: str, doing: str = "open") -> StoreLock:
    """The session's lock, or a one-line StoreLockedError naming the process that holds it."""
    folder = store / DIR
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(name.encode()).hexdigest()[:32]
    return StoreLock.acquire(
        folder / f"{digest}.lock",
        timeout=0,
        what=f"session {name!r}",
        fix=f"It is open in another `cascade chat`; close that one to {doing} it here, or "
        "use another --session.",
    )
