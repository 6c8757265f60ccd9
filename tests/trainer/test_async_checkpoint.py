"""Background (asynchronous) sharded checkpoints at 2 ranks under torchrun: the same result as synchronous
saves, a stop that waits for the save in flight, and a kill mid-write that resume survives.

    make test PYTEST_ARGS="tests/trainer/test_async_checkpoint.py"
    TORCH_TESTS_ON_HOST=1 IMAGE_UNDER_TEST=none .venv-test/bin/python -m pytest tests/trainer/test_async_checkpoint.py

tests/unit/test_background_save.py checks the rules one process can (one save in flight, visibility,
a full disk); tests/trainer/test_checkpoint_safety.py fills a real disk under FSDP, which now writes in
the background.
"""
from __future__ import annotations

import re

import pytest

from tests.support.training import (SIGTERM_TO_THE_WORKERS, interrupt_when_step_logged, make_workdir, python_json,
                                    trainer_command)

pytestmark = pytest.mark.tier("full")

STEPS = 12
GRACE_PERIOD_S = 30
GPT = ("--model gpt-tiny --seq-len 32 --synthetic-samples 256 --num-workers 0 --batch-size 4 --warmup-steps 2 "
       "--lr 3e-3 --seed 5 --log-every 1 --parallel fsdp --keep 20")


def run(workdir: str, scripts_dir: str, name: str, flags: str) -> str:
    return trainer_command(f"{GPT} {flags} --ckpt-dir {workdir}/{name} --metrics-file {workdir}/{name}.jsonl",
                           scripts_dir=scripts_dir)


@pytest.fixture(scope="module")
def workdir(torch_host):
    path = make_workdir(torch_host)
    yield path
    torch_host.run(f"rm -rf {path}")


def checkpoints(torch_host, scripts_dir: str, folder: str) -> dict:
    """Every checkpoint in FOLDER by step, with what missing_shard finds wrong in it (None: complete), and
    the temporary folders left beside them."""
    return python_json(torch_host, f"""
import json, pathlib, sys
sys.path.insert(0, {scripts_dir!r})
from trainer.checkpoint_folder import checkpoint_step, list_checkpoints_newest_first
from trainer.checkpoint_read import missing_shard
folder = pathlib.Path({folder!r})
print(json.dumps({{"complete": {{checkpoint_step(path): missing_shard(path) for path in
                                list_checkpoints_newest_first(folder)}},
                  "temporary": sorted(path.name for path in folder.glob(".step_*.tmp"))}}))
""")


def same_models(torch_host, scripts_dir: str, first: str, second: str) -> bool:
    return python_json(torch_host, f"""
import json, pathlib, sys, torch
sys.path.insert(0, {scripts_dir!r})
from export_weights import read_model_weights
a, b = read_model_weights(pathlib.Path({first!r})), read_model_weights(pathlib.Path({second!r}))
print(json.dumps(a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)))
""")


def test_async_and_synchronous_saves_hold_the_same_parameters_at_the_same_steps(torch_host, scripts_dir, workdir):
    for name, flag in [("async", "--async-checkpoint"), ("sync", "--no-async-checkpoint")]:
        output = torch_host.check_output(f"{run(workdir, scripts_dir, name, flag)} --max-steps {STEPS} "
                                         f"--save-every 3 2>&1")
        background = "writing it in the background" in output
        assert background == (name == "async"), output
    for step in (3, 6, 9, 12):
        checkpoint = f"step_{step:06d}"
        assert same_models(torch_host, scripts_dir, f"{workdir}/async/{checkpoint}", f"{workdir}/sync/{checkpoint}")
    assert checkpoints(torch_host, scripts_dir, f"{workdir}/async") == {
        "complete": {"12": None, "9": None, "6": None, "3": None}, "temporary": []}


def test_sigterm_waits_for_the_save_in_flight_then_saves_the_last_step(torch_host, scripts_dir, workdir):
    command = run(workdir, scripts_dir, "stop", "--max-steps 1000 --save-every 1")  # a save in flight at every step
    status, seconds, log = interrupt_when_step_logged(torch_host, command, workdir, "stop", 5, SIGTERM_TO_THE_WORKERS)
    assert status == 0 and seconds < GRACE_PERIOD_S, log
    stopped_at = int(re.search(r"stopped by SIGTERM at step (\d+)/", log)[1])
    found = checkpoints(torch_host, scripts_dir, f"{workdir}/stop")
    assert max(map(int, found["complete"])) == stopped_at, (found, log)
    assert all(problem is None for problem in found["complete"].values()) and found["temporary"] == [], found
    assert "Traceback" not in log


def test_a_kill_mid_write_leaves_only_complete_checkpoints_and_resume_takes_the_newest(torch_host, scripts_dir,
                                                                                     workdir):
    command = run(workdir, scripts_dir, "killed", "--max-steps 1000 --save-every 1")
    kill_the_workers = "pkill -KILL -P $(pgrep -P $pid)"  # no chance to finish or clean anything up
    interrupt_when_step_logged(torch_host, command, workdir, "killed", 6, kill_the_workers)
    found = checkpoints(torch_host, scripts_dir, f"{workdir}/killed")
    assert found["complete"] and all(problem is None for problem in found["complete"].values()), found
    newest = max(map(int, found["complete"]))
    # A save cut short stays under its temporary name, for a step after the newest complete one.
    assert all(int(name.split(".")[1].removeprefix("step_")) > newest for name in found["temporary"]), found

    resumed = torch_host.check_output(f"{run(workdir, scripts_dir, 'killed', '')} --max-steps {newest + 2} "
                                      f"--save-every 0 2>&1")
    assert f"resumed from {workdir}/killed/step_{newest:06d}: step {newest}," in resumed, resumed
    assert checkpoints(torch_host, scripts_dir, f"{workdir}/killed")["temporary"] == []  # pruned by the next save
