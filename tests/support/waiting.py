"""The one polling loop of the test suites."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, interval: float = 0.5,
               failure: str | Callable[[], str] = "the condition did not hold") -> T:
    """Calls PREDICATE every INTERVAL seconds until it returns something truthy, and returns that.

    After TIMEOUT seconds it raises AssertionError with FAILURE (a text, or a function that builds one
    from the state at that moment, such as the logs). A predicate that knows waiting is pointless (the
    container exited) raises its own AssertionError at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            message = failure() if callable(failure) else failure
            raise AssertionError(f"{message} (waited {timeout} s)")
        time.sleep(interval)
