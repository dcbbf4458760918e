"""An exclusive, process-wide store lock: fcntl.flock on ``<store>/lock`` holding the PID."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from cascade_cli.errors import StoreLockedError


class StoreLock:
    """Held by the one process that may write a store. Released on close or process death."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(
        cls, path: Path, timeout: float = 5.0, what: str | None = None, fix: str | None = None
    ) -> StoreLock:
        """Wait up to ``timeout`` seconds for the lock, then raise StoreLockedError (naming
        `what` is locked, default the store, and `fix`)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + max(0.0, timeout)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        holder = holder_pid(fd)
                        who = f"process {holder}" if holder else "another process"
                        raise StoreLockedError(
                            f"{what or f'store {path.parent}'} is in use by {who} (waited "
                            f"{timeout:g}s)",
                            fix
                            or "Wait for it to finish, stop it, or use another --disk-cache-path.",
                        ) from None
                    time.sleep(0.05)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    def release(self) -> None:
        """Give the lock up (idempotent)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing the descriptor drops the flock


def holder_pid(fd: int) -> int | None:
    """The PID the current holder wrote into the lock file, if readable."""
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None
