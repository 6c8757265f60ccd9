"""The run folder's names and the start-up log's prefix, in Python: their one home here, as run_folder.sh
is the shell's (tests/unit/test_run_folder.py keeps the two equal, and the copies that must stay: the
kernel's, which runs in the user's own Python).

The folder is made at build (mode 1777) and emptied by each start (entrypoint.sh); /run is a tmpfs, or
the read-only root's tmpfs, so nothing in it outlives the container.
"""
from __future__ import annotations

import json
import sys
from typing import Any

RUN_DIR = "/run/container"
SETTINGS = f"{RUN_DIR}/settings.json"  # what start-up resolved, written once (start/mode.sh)
STARTED = f"{RUN_DIR}/started"  # start-up is done: `docker exec` sees the final user (the healthcheck's mark)
SERVICES = f"{RUN_DIR}/services"  # the services started, a name a line (the healthcheck's list)
JUPYTER_URL = f"{RUN_DIR}/jupyter-url"  # JupyterLab's own address (start/jupyter.sh; the healthcheck)
# The stop's marker: the container's stop has begun (the supervisor makes it, in a folder of its own uid;
# kernel_stop.py, python-kernel and jupyter_work_first.py read it).
STOP_DIR = f"{RUN_DIR}/stop"
STOPPING = f"{STOP_DIR}/stopping"
# What work a stop cost, as the work itself tells it (a trainer whose save failed, reaped by its own shell
# where the supervisor never sees its status): one file per process, PID its name, a line its text. Made
# at start-up, writable by every uid, listable by the supervisor's only; the image's ENV names it
# (CONTAINER_LOST_WORK_DIR) for programs outside this library.
LOST_DIR = f"{RUN_DIR}/lost"
LOG_PREFIX = "[start]"
DEFAULT_STOP_TIMEOUT_S = 25


def log(message: str) -> None:
    print(f"{LOG_PREFIX} {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    log(f"WARNING: {message}")


def read_settings(path: str = SETTINGS) -> dict[str, Any]:
    with open(path, encoding="utf-8") as file:
        return json.load(file)


def stop_timeout_s(settings: str = SETTINGS) -> int:
    """STOP_TIMEOUT as start-up checked it: how long a stop waits for the user's work. Read where the
    supervisor reads it, so JupyterLab's closes wait as long as `docker stop` does; the default where the
    settings cannot be read (a server started outside this container's start-up)."""
    try:
        return int(read_settings(settings)["stop_timeout_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_STOP_TIMEOUT_S
