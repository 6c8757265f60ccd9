"""The stop's verdict (docker/rootfs/usr/local/lib/container/supervisor/stop_verdict.py) on records written by hand:
which work the stop ended unsaved, and the container's exit status. The real stops are in
tests/image/test_stop_endings.py.

    make test-unit PYTEST_ARGS=tests/unit/test_stop_verdict.py
"""
from __future__ import annotations

import pytest

from stop_verdict import Signalled, command_failed, exit_status, unsaved

SAVES = Signalled(10, "10(python train.py)", counts_unhandled=True, handles_sigterm=True, ignores_sigterm=False)
UNHANDLED = Signalled(11, "11(python word_language_model/main.py)", counts_unhandled=True, handles_sigterm=False,
                      ignores_sigterm=False)
IGNORES = Signalled(12, "12(python stubborn.py)", counts_unhandled=True, handles_sigterm=False, ignores_sigterm=True)
WATCH = Signalled(13, "13(watch nvidia-smi)", counts_unhandled=False, handles_sigterm=False, ignores_sigterm=False)


def test_a_program_that_handled_its_sigterm_and_ended_unseen_or_with_0_lost_nothing():
    assert unsaved({10: SAVES}, {}) == []
    assert unsaved({10: SAVES}, {10: 0}) == []


def test_a_python_program_that_did_not_handle_sigterm_died_of_it_unsaved():
    assert unsaved({11: UNHANDLED}, {}) == ["11(python word_language_model/main.py) did not handle SIGTERM and died of it"]
    assert unsaved({11: UNHANDLED}, {11: 143}) == unsaved({11: UNHANDLED}, {})


def test_a_program_that_handled_its_sigterm_but_failed_is_named_with_its_status():
    assert unsaved({10: SAVES}, {10: 1}) == ["10(python train.py) exited with status 1 after its SIGTERM"]
    assert unsaved({13: WATCH}, {13: 2}) == ["13(watch nvidia-smi) exited with status 2 after its SIGTERM"]


def test_what_loses_nothing_by_dying_of_sigterm_and_what_the_stop_names_itself_are_left_out():
    """watch, tail -f, a notebook kernel: their death by SIGTERM loses nothing. One that ignored SIGTERM is
    named by the stop as still running when step 3 came."""
    assert unsaved({13: WATCH}, {}) == [] and unsaved({13: WATCH}, {13: 143}) == []
    assert unsaved({12: IGNORES}, {}) == []


def test_a_command_that_holds_the_work_failed_only_with_a_status_step_3_does_not_give():
    """bash -c 'torchrun ...' passes on torchrun's 1 when the workers died; `sleep infinity` ends with
    143 at step 3 and a shell hung up with 129, having lost nothing."""
    assert command_failed(1) and command_failed(2)
    assert not any(command_failed(status) for status in (None, 0, 143, 129))


@pytest.mark.parametrize("ended_by, clean, status, hub, expected", [
    ("docker stop", True, 0, False, 0), ("docker stop", False, 0, False, 1),
    ("command", True, 0, False, 0), ("command", False, 0, False, 1), ("command", True, 3, False, 3),
    ("command", False, 143, False, 143),
    ("service", True, 0, False, 1), ("service", True, 0, True, 0), ("service", False, 0, True, 1),
    ("service", True, 2, True, 2),
])
def test_the_exit_status_is_0_only_when_nothing_was_lost(ended_by, clean, status, hub, expected):
    assert exit_status(ended_by, clean, status, hub) == expected
