"""BENCHMARKS.md "JupyterHub": seconds from a user's login on the hub's page (the shipped authenticator:
they signed up and the admin authorized them first, off the clock) to their JupyterLab page answering
through the hub's proxy (the spawn of their container included), and the memory each idle user
container holds, for the users of tests/team/test_jupyterhub.py.

    CA_BUNDLE=... IMAGE_UNDER_TEST=pytorch-dev:cpu-latest .venv-test/bin/python -m tools.bench_hub
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from tests.support.containers import docker
from tests.support.hub import USERS, add_user, log_in, open_jupyterlab, running_hub

IDLE_S = 90  # after the page has loaded: the kernel-less server settles
# A browser waits on the hub's spawn page, which follows the spawn's progress events and moves on as soon
# as the server is ready; polling the lab page this often stands in for it without adding seconds.
POLL_S = 0.25


def main() -> None:
    with tempfile.TemporaryDirectory() as folder, running_hub(os.environ["IMAGE_UNDER_TEST"], Path(folder)) as hub:
        for user in USERS:
            add_user(hub, user)
        for user in USERS:
            started = time.monotonic()
            session = log_in(hub, user)
            logged_in = time.monotonic()
            open_jupyterlab(hub, user, session, poll_s=POLL_S)
            print(f"{user}: login to JupyterLab answering: {time.monotonic() - started:.1f} s "
                  f"(the login POST and its redirects: {logged_in - started:.1f} s)", flush=True)
        # The hub's own account of each spawn ("User alice took N seconds to start"), from its whole log.
        for line in docker("logs", hub.container, check=False).stderr.splitlines():
            if "seconds to start" in line:
                print("hub:", line.strip(), flush=True)
        time.sleep(IDLE_S)
        containers = [hub.container_of(user) for user in USERS] + [hub.container]
        print(docker("stats", "--no-stream", "--format", "{{.Name}}: {{.MemUsage}}", *containers).stdout, end="")
        print(Path("/proc/loadavg").read_text().split()[:3], "load average")


if __name__ == "__main__":
    main()
