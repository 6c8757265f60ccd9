"""Runs train_ddp.main once per case, each in a process of its own forked after one import of torch, and
prints every case's exit status, stdout and stderr as JSON. A refused flag costs a fork instead of a
Python start and a torch import (about 10 s each on CI's two cores), and each case still starts from the
state a fresh `python train_ddp.py ARGS` has right after its imports.

    python refusals.py SCRIPTS_DIR < cases.json     # cases: [{"argv": [...], "setup": "shell line"}]
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, sys.argv[1])
import train_ddp  # noqa: E402  (torch, once, before the forks)


def run_in_a_fork(argv: list[str], folder: str, output: str) -> int:
    out, err = (os.open(os.path.join(output, name), os.O_WRONLY | os.O_CREAT, 0o600) for name in ("out", "err"))
    pid = os.fork()
    if pid == 0:
        os.chdir(folder)
        os.dup2(out, 1)
        os.dup2(err, 2)
        try:
            status = train_ddp.main(argv)
        except SystemExit as ended:  # argparse's exit, as a fresh process would end
            status = ended.code if isinstance(ended.code, int) else (ended.code is not None)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status or 0)
    os.close(out)
    os.close(err)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


results = []
for case in json.load(sys.stdin):
    folder, output = tempfile.mkdtemp(), tempfile.mkdtemp()  # the case's empty working folder; its output
    subprocess.run(case.get("setup") or "true", shell=True, cwd=folder, check=True)
    status = run_in_a_fork(case["argv"], folder, output)
    with open(os.path.join(output, "out")) as out, open(os.path.join(output, "err")) as err:
        results.append({"status": status, "stdout": out.read(), "stderr": err.read()})
print(json.dumps(results))
