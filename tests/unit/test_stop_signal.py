"""The trainer's stop signals (scripts/trainer/distributed.py, StopSignal) leave the process as they found
it: a signal ignored on entry stays ignored (`nohup`), and every handler replaced is put back on exit, so
a notebook kernel that ran train_ddp.main() in a cell ends on the next SIGTERM (main() itself, in such a
process: tests/host/test_main_in_a_kernel.py).

    make test-unit PYTEST_ARGS=tests/unit/test_stop_signal.py
"""
from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from trainer.distributed import STOP_SIGNALS, StoppedWithNothingToSave, StopSignal


def users_handler(signum: int, frame: object) -> None:
    """A handler of the process's own, as a kernel or an application installs before calling the trainer."""


@pytest.fixture
def handlers_as_a_nohup_kernel_has_them() -> Iterator[dict[int, object]]:
    """SIGTERM handled by the process's own handler, SIGINT Python's default, SIGHUP ignored; put back after."""
    before = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    signal.signal(signal.SIGTERM, users_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    yield {number: signal.getsignal(number) for number in STOP_SIGNALS}
    for number, handler in before.items():
        signal.signal(number, handler)


def test_a_signal_ignored_on_entry_stays_ignored_and_the_others_are_recorded(handlers_as_a_nohup_kernel_has_them):
    with StopSignal() as stop:
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGHUP)  # ignored: neither recorded nor fatal
        assert stop.received is None
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.received == "SIGTERM"


def test_a_stop_signal_with_nothing_to_lose_ends_there_and_then_and_otherwise_waits_for_the_boundary(
        handlers_as_a_nohup_kernel_has_them):
    with StopSignal() as stop:
        with stop.nothing_to_lose(False):  # a later step: the signal is recorded for the step boundary
            os.kill(os.getpid(), signal.SIGINT)
        assert stop.received == "SIGINT"
    with StopSignal() as stop, pytest.raises(StoppedWithNothingToSave) as stopped:
        with stop.nothing_to_lose(True):  # the first step: nothing trained since the checkpoint
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("the signal did not end the step")
    assert stopped.value.signal_name == "SIGTERM"
    with StopSignal() as stop:
        os.kill(os.getpid(), signal.SIGTERM)  # between the vote and the step: the step does not begin
        with pytest.raises(StoppedWithNothingToSave), stop.nothing_to_lose(True):
            raise AssertionError("the step began")
        os.kill(os.getpid(), signal.SIGINT)  # outside it: recorded, never raised
        assert stop.received == "SIGINT"


def test_every_handler_is_put_back_on_exit_normal_or_not(handlers_as_a_nohup_kernel_has_them):
    before = handlers_as_a_nohup_kernel_has_them
    with StopSignal():
        assert signal.getsignal(signal.SIGTERM) != users_handler
    assert {number: signal.getsignal(number) for number in STOP_SIGNALS} == before

    with pytest.raises(RuntimeError), StopSignal():
        raise RuntimeError("a crash in the training loop")
    assert {number: signal.getsignal(number) for number in STOP_SIGNALS} == before


def test_sigusr1_asks_for_one_checkpoint_however_often_it_comes_and_never_stops(handlers_as_a_nohup_kernel_has_them):
    """Slurm's --signal=USR1 may be delivered twice; by default SIGUSR1 would end the trainer unsaved."""
    before = signal.getsignal(signal.SIGUSR1)
    with StopSignal() as stop:
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.save_asked and stop.received is None
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGUSR1)  # within the stop: harmless
        assert stop.received == "SIGTERM"
    assert signal.getsignal(signal.SIGUSR1) == before


def test_sigusr1_repeated_after_the_vote_that_answered_it_asks_for_no_second_checkpoint(one_rank, monkeypatch):
    """`kill -USR1` to every rank, or Slurm's second delivery, may land after the step's vote that already
    made the ranks save: within SAVE_SIGNAL_REPEATS_WITHIN_S it is the same request."""
    import torch.distributed as dist
    with StopSignal() as stop:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.agree(dist.group.WORLD).save
        os.kill(os.getpid(), signal.SIGUSR1)
        assert not stop.agree(dist.group.WORLD).save
        monkeypatch.setattr("trainer.distributed.SAVE_SIGNAL_REPEATS_WITHIN_S", 0.0)
        os.kill(os.getpid(), signal.SIGUSR1)  # a later request: a checkpoint of its own
        assert stop.agree(dist.group.WORLD).save


def test_a_sigusr1_that_lands_while_a_vote_is_built_is_carried_by_the_next_vote(one_rank, monkeypatch):
    """The handler runs between any two lines of the loop, the vote's own included: a request that lands
    after the vote read the requests, and before it marked them carried, must not be wiped out."""
    import torch
    import torch.distributed as dist
    build_the_vote = torch.tensor

    def signal_arrives_meanwhile(*args: object, **kwargs: object) -> torch.Tensor:
        os.kill(os.getpid(), signal.SIGUSR1)  # Python runs the handler before this function returns
        return build_the_vote(*args, **kwargs)

    with StopSignal() as stop:
        monkeypatch.setattr(torch, "tensor", signal_arrives_meanwhile)
        assert not stop.agree(dist.group.WORLD).save, "asked after this vote read the requests"
        monkeypatch.setattr(torch, "tensor", build_the_vote)
        assert stop.agree(dist.group.WORLD).save, "the request was lost"


def test_a_sigusr1_that_lands_during_a_vote_that_saves_is_answered_by_that_checkpoint(one_rank, monkeypatch):
    """`kill -USR1` to every rank reaches some while they wait in the vote: the checkpoint the vote decides
    answers it, and no second one follows a step later."""
    import torch
    import torch.distributed as dist
    build_the_vote = torch.tensor

    def signal_arrives_meanwhile(*args: object, **kwargs: object) -> torch.Tensor:
        os.kill(os.getpid(), signal.SIGUSR1)
        return build_the_vote(*args, **kwargs)

    with StopSignal() as stop:
        os.kill(os.getpid(), signal.SIGUSR1)
        monkeypatch.setattr(torch, "tensor", signal_arrives_meanwhile)
        assert stop.agree(dist.group.WORLD).save
        monkeypatch.setattr(torch, "tensor", build_the_vote)
        assert not stop.agree(dist.group.WORLD).save, "a second checkpoint for one request"
