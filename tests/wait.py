"""Waiting for a state: poll it with a deadline, never sleep a guessed time.

A test that sleeps "long enough" for another thread or process to get somewhere fails on a
slow or busy machine and wastes time on a fast one; `until` returns as soon as the state is
there and, when it never comes, fails naming what did not happen. The deadline only guards
against a hang: make it generous (a busy 2-core machine is many times slower than a laptop).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds between two looks at the state.
INTERVAL = 0.02


def until(
    predicate: Callable[[], T],
    timeout: float = 120,
    what: str | Callable[[], str] = "the awaited state",
    interval: float = INTERVAL,
) -> T:
    """Call `predicate` until it returns a truthy value, and return that value.

    An exception from `predicate` propagates at once (assert inside it for states that mean the
    awaited one can no longer come, e.g. a process that exited). After `timeout` seconds an
    AssertionError names `what` (a callable is called then, e.g. for a log's tail)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"{said} did not happen within {timeout:g} s")
        time.sleep(interval)
