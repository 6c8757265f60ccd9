"""The supervisor's count of the kernel's out-of-memory kills (docker/rootfs/usr/local/lib/container/
supervisor/oom_watch.py), on cgroup files written by hand: cgroup v2's memory.events and v1's memory.oom_control.
The real kill, in a container with a memory limit, is in tests/image/test_stop_lost_work.py.

    make test-unit PYTEST_ARGS=tests/unit/test_oom_watch.py
"""
from __future__ import annotations

import pathlib
import subprocess

from oom_watch import UNLIMITED, OomWatch, describe_limit, read_number

from tests.support.waiting import wait_until

V2_EVENTS = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n"
V1_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"


def test_the_kill_count_and_the_limit_are_read_from_either_cgroup_version(tmp_path):
    (tmp_path / "memory.events").write_text(V2_EVENTS)
    (tmp_path / "memory.oom_control").write_text(V1_CONTROL)
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "memory.limit_in_bytes").write_text("536870912\n")
    assert read_number(str(tmp_path / "memory.events"), "oom_kill") == 2
    assert read_number(str(tmp_path / "memory.oom_control"), "oom_kill") == 3
    assert read_number(str(tmp_path / "memory.max")) == UNLIMITED
    assert describe_limit(read_number(str(tmp_path / "memory.limit_in_bytes"))) == \
        "the container's memory limit is 512 MiB"
    assert read_number(str(tmp_path / "missing"), "oom_kill") is None


def test_a_look_names_only_the_kills_since_the_last(tmp_path, capsys):
    events, limit = tmp_path / "memory.events", tmp_path / "memory.max"
    events.write_text(V2_EVENTS)
    limit.write_text("max\n")
    watch = OomWatch(enabled=False)
    watch.files, watch.count = (str(events), str(limit)), 2
    watch.look()
    assert capsys.readouterr().err == ""
    events.write_text(V2_EVENTS.replace("oom_kill 2", "oom_kill 4"))
    watch.look()
    watch.look()  # told at once where a process seen before has ended, else at the next look
    line = capsys.readouterr().err
    assert "ended 2 processes of this container" in line and line.count("out-of-memory") == 1, line
    assert "(the container has no memory limit, so the host ran out)" in line, line
    watch.look()
    assert capsys.readouterr().err == ""
    assert watch.killed == 2


def test_a_kill_is_told_with_the_processes_that_ended_with_it(tmp_path, capsys):
    """The kernel's log, which names the killed process, cannot be read in a container: the line names
    what ended between the look before the kill and the one that tells it, the killed one among them."""
    events, limit = tmp_path / "memory.events", tmp_path / "memory.max"
    events.write_text(V2_EVENTS)
    limit.write_text("536870912\n")
    watch = OomWatch(enabled=False)
    watch.files, watch.count = (str(events), str(limit)), 2
    victim = subprocess.Popen(["sleep", "3600"])
    try:
        # Seen in the middle of its exec, its command line is still empty and it is named by its bare name
        # ("25950(sleep)": landing run 51's unit tier): the look comes once it runs `sleep 3600`.
        wait_until(lambda: pathlib.Path(f"/proc/{victim.pid}/cmdline").read_bytes() == b"sleep\0003600\000", 10,
                   interval=0.01)
        watch.look()  # sees it running
        victim.kill()
        victim.wait()
        events.write_text(V2_EVENTS.replace("oom_kill 2", "oom_kill 3"))
        watch.look(final=True)
    finally:
        victim.kill()
    line = capsys.readouterr().err
    assert "ended 1 process of this container (among those that ended just now: " in line, line
    assert f"{victim.pid}(sleep 3600)" in line and "memory limit is 512 MiB" in line, line
    assert watch.killed == 1 and f"{victim.pid}(sleep 3600)" in watch.named


def test_a_watch_without_a_readable_count_never_wakes_the_supervisor():
    assert OomWatch(enabled=False).seconds_left() == float("inf")
