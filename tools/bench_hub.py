"""BENCHMARKS.md "JupyterHub": seconds from a user's login on the hub's page (the shipped authenticator:
they signed up and the admin authorized them first, off the clock) to their JupyterLab page answering
through the hub's proxy (the spawn of their container included), and the memory each idle user
container holds, for the users of tests/team/test_jupyterhub.py.

    CA_BUNDLE=... IMAGE_UNDER_TEST=pytorch-dev:cpu-latest .venv-test/bin/python -m tools.bench_hub
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.hub import USERS, add_user, log_in, open_jupyterlab, running_hub

IDLE_S = 90  # after the page has loaded: the kernel-less server settles


def main() -> None:
    with tempfile.TemporaryDirectory() as folder, running_hub(os.environ["IMAGE_UNDER_TEST"], Path(folder)) as hub:
        for user in USERS:
            add_user(hub, user)
        for user in USERS:
            started = time.monotonic()
            session = log_in(hub, user)
            logged_in = time.monotonic()
            open_jupyterlab(hub, user, session)
            print(f"{user}: login to JupyterLab answering: {time.monotonic() - started:.1f} s "
                  f"(the login POST and its redirects: {logged_in - started:.1f} s)", flush=True)
        # The hub's own account of each spawn ("Server alice is ready", "took N seconds to start").
        hub_log = subprocess.run(["docker", "logs", f"{hub.run}-hub"], capture_output=True, text=True, timeout=60)
        for line in (hub_log.stdout + hub_log.stderr).splitlines():
            if "seconds to start" in line:
                print("hub:", line.strip(), flush=True)
        time.sleep(IDLE_S)
        containers = [hub.container_of(user) for user in USERS] + [f"{hub.run}-hub"]
        print(subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.Name}}: {{.MemUsage}}", *containers],
                             capture_output=True, text=True, check=True, timeout=60).stdout, end="")
        print(Path("/proc/loadavg").read_text().split()[:3], "load average")


if __name__ == "__main__":
    main()
