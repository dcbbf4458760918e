"""The one place llama_cpp is imported; backend initialisation and log routing."""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any

import llama_cpp as ll
from llama_cpp import _logger  # noqa: F401  (installs llama.cpp's log callback)

__all__ = ["ensure_backend", "init_dry", "init_penalties", "ll", "llama_version", "set_verbose"]

#: llama.h as installed with 0.3.36's library: ``llama_sampler_init_penalties(int32_t n_vocab,
#: int32_t penalty_last_n, float penalty_repeat, float penalty_freq, float penalty_present)``,
#: which the binding declares too. (Upstream llama.cpp later dropped n_vocab; a call with four
#: arguments to this library leaves penalty_last_n to whatever a register holds: a window of
#: garbage, or none at all. tests/engine/test_special_tokens.py checks the prototype against
#: the installed header.)
_penalties: Any = ll.llama_sampler_init_penalties


def init_penalties(
    last_n: int, repeat: float, freq: float = 0.0, present: float = 0.0, n_vocab: int = 0
) -> Any:
    """A repeat/frequency/presence penalty sampler over the last ``last_n`` tokens."""
    return _penalties(n_vocab, last_n, repeat, freq, present)


def init_dry(
    vocab: Any,
    multiplier: float,
    base: float,
    allowed: int,
    last_n: int,
    breakers: tuple[str, ...],
) -> Any:
    """llama.h: ``llama_sampler_init_dry(vocab, dry_multiplier, dry_base, dry_allowed_length,
    dry_penalty_last_n, seq_breakers, num_breakers)`` (0.3.36's binding matches it)."""
    arr = (ctypes.c_char_p * len(breakers))(*(b.encode() for b in breakers))
    return ll.llama_sampler_init_dry(vocab, multiplier, base, allowed, last_n, arr, len(breakers))


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


def llama_version() -> str:
    """The llama-cpp-python release, which pins the llama.cpp that writes our KV states."""
    return str(ll.__version__)
