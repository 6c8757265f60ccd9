"""What a program tells the container's stop it lost (scripts/trainer/lost_work.py writes it, the stop's
verdict names it: stop_verdict.reported): one file per process in the image's CONTAINER_LOST_WORK_DIR.
The real stop that names one is in tests/image/test_stop_lost_work.py.

    make test-unit PYTEST_ARGS=tests/unit/test_lost_work_reports.py
"""
from __future__ import annotations

import os

from stop_verdict import reported
from trainer.lost_work import FOLDER_VARIABLE, report_lost_work


def test_a_report_is_one_line_in_a_file_named_by_the_pid(tmp_path, monkeypatch):
    monkeypatch.setenv(FOLDER_VARIABLE, str(tmp_path))
    report_lost_work("train_ddp.py stopped by SIGTERM without its last checkpoint:\nno space left")
    assert (tmp_path / str(os.getpid())).read_text() == (
        "train_ddp.py stopped by SIGTERM without its last checkpoint: no space left\n")


def test_a_link_planted_under_the_pid_is_never_followed_and_costs_the_trainer_nothing(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_text("kept\n")
    folder = tmp_path / "lost"
    folder.mkdir()
    (folder / str(os.getpid())).symlink_to(victim)
    monkeypatch.setenv(FOLDER_VARIABLE, str(folder))
    report_lost_work("anything")
    assert victim.read_text() == "kept\n"


def test_outside_the_image_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(FOLDER_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    report_lost_work("anything")
    assert list(tmp_path.iterdir()) == []


def test_the_stop_names_each_report_by_its_pid_in_order():
    assert reported({412: "b", 97: "a"}) == ["97 said: a", "412 said: b"]
    assert reported({}) == []
