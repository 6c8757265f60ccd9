"""Once the container is stopping, a notebook kernel ends when its cell does.

`docker stop` gives a kernel its SIGTERM like any trainer (stop_policy.py). A cell whose training loop
handles SIGTERM saves and returns; the kernel would then sit idle until the stop's time ran out. So after
each cell, if the supervisor has marked the container as stopping, the kernel flushes its output and
exits 0: its work has ended. Nothing else changes: outside a stop this costs one stat() per cell.

Two ways in, one rule:
  - the image's kernel (python-kernel) runs this file as its launcher: it starts ipykernel as
    `python -m ipykernel_launcher` does and registers the rule on the kernel's shell itself, after every
    config file was read, so a user's `c.InteractiveShellApp.exec_lines = [...]` cannot remove it;
  - any other IPython kernel (a kernel spec of the user's) runs it from /etc/ipython's exec_lines.
"""
import os
import sys

# run_folder.STOPPING, the stop's marker (stop.py's mark_stopping), copied: this file runs in the user's
# own Python, which must not import the container's modules (tests/unit/test_run_folder.py keeps it equal).
STOPPING = "/run/container/stop/stopping"


def end_the_kernel_when_the_container_stops(_result=None):
    if os.path.exists(STOPPING):
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(0)


def register(shell) -> None:
    """Once per kernel, whichever way in ran first."""
    if shell is not None and not getattr(shell, "ends_when_the_container_stops", False):
        shell.events.register("post_run_cell", end_the_kernel_when_the_container_stops)
        shell.ends_when_the_container_stops = True


if __name__ == "__main__":
    del sys.path[0]  # this folder: a notebook must not import the container's own modules by accident
    from ipykernel.kernelapp import IPKernelApp
    kernel = IPKernelApp.instance()
    kernel.initialize()
    register(kernel.shell)
    kernel.start()
else:
    from IPython import get_ipython
    register(get_ipython())
