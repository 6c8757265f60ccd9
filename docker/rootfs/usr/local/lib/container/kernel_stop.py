"""Run in every notebook kernel at its start (/etc/ipython/ipython_kernel_config.py): once the container is
stopping, the kernel ends when its cell does.

`docker stop` gives a kernel its SIGTERM like any trainer (stop_policy.py). A cell whose training loop
handles SIGTERM saves and returns; the kernel would then sit idle until the stop's time ran out. So after
each cell, if the supervisor has marked the container as stopping, the kernel flushes its output and
exits 0: its work has ended. Nothing else changes: outside a stop this costs one stat() per cell.
"""
import os
import sys

from IPython import get_ipython

STOPPING = "/run/container/stop/stopping"  # supervisor.py's mark_stopping


def end_the_kernel_when_the_container_stops(_result=None):
    if os.path.exists(STOPPING):
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(0)


if get_ipython() is not None:
    get_ipython().events.register("post_run_cell", end_the_kernel_when_the_container_stops)
