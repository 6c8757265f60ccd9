"""A damaged checkpoint is set aside in one line that never repeats torch's advice to load it unsafely,
and when none is left to resume from, one line says that training starts afresh
(scripts/trainer/checkpoint_read.py, load_newest_checkpoint).

    make test-unit PYTEST_ARGS=tests/unit/test_checkpoint_damage.py
"""
from __future__ import annotations

import os

import torch

from trainer.checkpoint_read import load_newest_checkpoint


class NotATensor:
    """An object the weights-only loader refuses, as it refuses a planted or garbled pickle."""


def test_every_checkpoint_damaged_sets_each_aside_and_says_training_starts_afresh(tmp_path, capsys):
    torch.save({"step": 4, "config": {}, "extra": NotATensor()}, tmp_path / "step_000004.pt")
    (tmp_path / "step_000002.pt").write_bytes(b"half a checkpoint")
    state = load_newest_checkpoint(tmp_path, template=dict, check_config=lambda config: None, is_main=True)
    assert state is None
    lines = capsys.readouterr().out.strip().splitlines()
    assert "weights_only" not in "\n".join(lines) and len(lines) == 3, lines
    assert lines[0].startswith(f"warning: checkpoint {tmp_path}/step_000004.pt is unreadable (the safe loader "
                               f"refused it: Unsupported global: GLOBAL {__name__}.NotATensor was not an allowed "
                               f"global by default); moved"), lines
    assert lines[1].startswith(f"warning: checkpoint {tmp_path}/step_000002.pt is unreadable ("), lines
    assert lines[-1] == (f"warning: no readable checkpoint left in {tmp_path} (2 set aside as *.corrupt): "
                         f"training starts afresh at step 0")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["step_000002.pt.corrupt", "step_000004.pt.corrupt"]


def test_a_fifo_planted_as_the_newest_checkpoint_is_set_aside_at_once_and_the_previous_one_resumed(tmp_path, capsys):
    """Opened as torch.load opens a name, a FIFO waits for a writer for ever: the resume hung for the whole
    stop. Anyone who can write a shared --ckpt-dir can plant one; a link to one is refused alike."""
    torch.save({"step": 4, "config": {}}, tmp_path / "step_000004.pt")
    os.mkfifo(tmp_path / "step_000006.pt")
    (tmp_path / "step_000008.pt").symlink_to(tmp_path / "step_000006.pt")
    state = load_newest_checkpoint(tmp_path, template=dict, check_config=lambda config: None, is_main=True)
    assert state is not None and state["step"] == 4
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(" is unreadable ")[1].split(";")[0] for line in lines] == ["(is not a regular file)"] * 2, lines
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "step_000004.pt", "step_000006.pt.corrupt", "step_000008.pt.corrupt"]


def test_a_fresh_folder_says_nothing(tmp_path, capsys):
    assert load_newest_checkpoint(tmp_path, template=dict, check_config=lambda config: None, is_main=True) is None
    assert capsys.readouterr().out == ""
