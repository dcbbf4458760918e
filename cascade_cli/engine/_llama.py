"""The one place llama_cpp is imported; backend initialisation and log routing."""

from __future__ import annotations

import logging
import threading

import llama_cpp as ll
from llama_cpp import _logger  # noqa: F401  (installs llama.cpp's log callback)

__all__ = ["ensure_backend", "ll", "set_verbose"]

_lock = threading.Lock()
_ready = False


def set_verbose(verbose: bool) -> None:
    """Show llama.cpp's own log lines only when verbose."""
    level = logging.DEBUG if verbose else logging.CRITICAL + 1
    logging.getLogger("llama-cpp-python").setLevel(level)


def ensure_backend() -> None:
    """Initialise llama.cpp's backends once per process."""
    global _ready
    with _lock:
        if not _ready:
            ll.llama_backend_init()
            _ready = True


set_verbose(False)
