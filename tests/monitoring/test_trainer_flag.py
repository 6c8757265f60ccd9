"""--prometheus-port: a bad value or a taken port ends the trainer with one line, and of a node's ranks
only local rank 0 listens (one port per node).

    make test FLAVOR=cpu PYTEST_ARGS=tests/monitoring/test_trainer_flag.py
"""
from __future__ import annotations

TRAINER = "OMP_NUM_THREADS=1 python /opt/scripts/train_ddp.py --ckpt-dir /tmp/ckpt-flag"
TINY = ("--model tiny --image-size 16 --synthetic-samples 256 --batch-size 8 --num-workers 0 --device cpu "
        "--log-every 1 --ckpt-dir /tmp/ckpt-ranks --save-every 0")


def test_a_bad_port_is_one_line_naming_the_flag(training_container):
    result = training_container.run(f"{TRAINER} --prometheus-port 65536")
    assert result.rc == 2
    assert result.stderr.strip().count("\n") == 0
    assert "--prometheus-port: must be a TCP port (1-65535)" in result.stderr, result.stderr


def test_a_taken_port_is_one_line_saying_what_to_do(training_container):
    result = training_container.run(
        "python -m http.server 9411 --bind 127.0.0.1 >/dev/null 2>&1 & "
        "timeout 30 bash -c 'until ss -ltnH | grep -q 127.0.0.1:9411; do sleep 0.1; done'; "
        f"{TRAINER} --prometheus-port 9411 --max-steps 1; status=$?; kill %1; exit $status")
    assert result.rc != 0
    assert result.stderr.strip().splitlines() == [
        f"--prometheus-port 9411: cannot listen on {training_container.run('hostname').stdout.strip()} "
        "(Address already in use); another trainer may hold it: pick a free port"]


def test_only_local_rank_0_of_a_node_serves(training_container):
    listeners = training_container.run(
        f"OMP_NUM_THREADS=1 timeout 110 torchrun --standalone --nproc-per-node=2 /opt/scripts/train_ddp.py {TINY} "
        "--max-steps 100000 --prometheus-port 9412 >/tmp/ranks.log 2>&1 & "
        "for _ in $(seq 100); do curl -fs localhost:9412/metrics | grep -q '^trainer_loss' && break; sleep 1; done; "
        # Listeners on the trainer's port and the next ones, where a server per rank would also listen.
        "ss -ltnH | awk '{print $4}' | grep -cE ':941[2-9]$'; curl -fs localhost:9412/metrics; kill %1")
    count, exposition = listeners.stdout.split("\n", 1)
    assert count == "1", listeners.stdout + listeners.stderr + training_container.run("cat /tmp/ranks.log").stdout
    assert 'rank="0"' in exposition and 'rank="1"' not in exposition
