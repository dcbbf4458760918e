"""Deferred Ctrl-C: the first SIGINT is held until `check()`, the second stops at once."""

from __future__ import annotations

import signal

import pytest

from cascade_cli.cli.interrupt import Deferred


def test_first_sigint_waits_for_check_second_raises_at_once() -> None:
    """raise_signal runs the Python handler before it returns (CPython checks for pending
    signals there), so each SIGINT below has been handled by the next line."""
    before = signal.getsignal(signal.SIGINT)
    with Deferred() as stop:
        stop.check()  # nothing pressed yet
        signal.raise_signal(signal.SIGINT)
        assert stop.requested  # handled, not raised
        with pytest.raises(KeyboardInterrupt):
            stop.check()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # raised by the signal itself, not a check
    assert signal.getsignal(signal.SIGINT) is before
