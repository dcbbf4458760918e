"""Deferred Ctrl-C: the first SIGINT is held until `check()`, the second stops at once."""

from __future__ import annotations

import os
import signal
import time

import pytest

from cascade_cli.cli.interrupt import Deferred


def test_first_sigint_waits_for_check_second_raises_at_once() -> None:
    before = signal.getsignal(signal.SIGINT)
    with Deferred() as stop:
        stop.check()  # nothing pressed yet
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested  # handled, not raised
        with pytest.raises(KeyboardInterrupt):
            stop.check()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the handler runs here at the latest
    assert signal.getsignal(signal.SIGINT) is before
