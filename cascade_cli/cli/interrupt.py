"""Ctrl-C during a long write (ingest): finish the chunk in hand, then stop with exit 130.

Python's default handler raises KeyboardInterrupt at whatever bytecode runs, in the middle of
a lock's `with`, a transaction or a progress bar's update; a lock left held there can hang the
exit (a worker thread waits on it while the main thread joins the worker). Deferred, the
interrupt is raised by `check()`, called between chunks. A second Ctrl-C stops at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from types import FrameType
from typing import Any

NOTICE = b"\nstopping after this chunk (Ctrl-C again to stop now)\n"


class Deferred:
    """While entered (main thread only), SIGINT sets `requested`; `check()` raises it."""

    def __init__(self) -> None:
        self.requested = False
        self._old: Any = None

    def __enter__(self) -> Deferred:
        if threading.current_thread() is not threading.main_thread():
            return self  # signals reach the main thread only
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            return self  # started with SIGINT ignored (nohup, a background job): left so
        self._old = signal.signal(signal.SIGINT, self._handle)
        if self._old is None:  # a handler installed outside Python
            self._old = signal.default_int_handler
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C: at once
        with contextlib.suppress(OSError):
            os.write(2, NOTICE)

    def check(self) -> None:
        """Raise KeyboardInterrupt if Ctrl-C was pressed since entering."""
        if self.requested:
            raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None
