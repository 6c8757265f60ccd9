"""Code run as a notebook runs it: in a kernel that JupyterLab's REST API started (what opening a notebook
does), driven by jupyter_client inside the container, since the kernel's ports are not published."""
from __future__ import annotations

import json
import shlex

import requests

from tests.support import HTTP_TIMEOUT_S

# Runs in the container: connect to the kernel, wait until it answers, execute, print the reply's content.
CLIENT = """
import json, sys
from jupyter_client import BlockingKernelClient
from jupyter_client.connect import find_connection_file
client = BlockingKernelClient(connection_file=find_connection_file(sys.argv[1]))
client.load_connection_file()
# No heartbeat channel: with one, wait_for_ready calls the kernel dead after one heartbeat missed by a
# second, which a kernel starved by the test's trainers can miss. Without, it waits for the kernel_info
# reply and for IOPub to carry messages, so no output or idle status goes out before we listen.
client.start_channels(hb=False)
client.wait_for_ready(timeout=60)
reply = client.execute_interactive(sys.argv[2], timeout=60, output_hook=lambda message: None)  # only the reply
print(json.dumps(reply["content"]))
"""

# The same, but leaves CODE running: returns once the kernel says it is busy with it.
STARTER = CLIENT.split("reply = ")[0] + """
request = client.execute(sys.argv[2])
while True:
    message = client.get_iopub_msg(timeout=60)
    if (message["parent_header"].get("msg_id") == request and message["msg_type"] == "status"
            and message["content"]["execution_state"] == "busy"):
        break
print("busy")
"""


def start_a_notebook_kernel(base_url: str, token: str) -> str:
    """Starts a python3 kernel through the server at BASE_URL, as opening a notebook does; returns its id."""
    return requests.post(f"{base_url}/api/kernels", headers={"Authorization": f"token {token}"},
                         json={"name": "python3"}, timeout=HTTP_TIMEOUT_S).json()["id"]


def start_in_a_notebook_kernel(container, base_url: str, token: str, code: str) -> None:
    """Starts a python3 kernel and leaves CODE running in it, as a cell a user started and left."""
    start_in_kernel(container, start_a_notebook_kernel(base_url, token), code)


def start_in_kernel(container, kernel: str, code: str) -> None:
    """Leaves CODE running in the kernel whose id is KERNEL, as a cell a user started and left."""
    result = container.run(f"python -c {shlex.quote(STARTER)} kernel-{kernel}.json {shlex.quote(code)}", timeout=120)
    assert result.rc == 0 and "busy" in result.stdout, result.stdout + result.stderr


def run_in_a_notebook_kernel(container, base_url: str, token: str, code: str) -> dict:
    """Starts a python3 kernel through the server at BASE_URL and runs CODE in it; returns the content of
    the execute reply (status "ok", or "error" with ename and evalue)."""
    return run_in_kernel(container, start_a_notebook_kernel(base_url, token), code)


def run_in_kernel(container, kernel: str, code: str) -> dict:
    """Runs CODE in the kernel whose id is KERNEL, once it answers; returns the content of the execute reply."""
    result = container.run(f"python -c {shlex.quote(CLIENT)} kernel-{kernel}.json {shlex.quote(code)}", timeout=120)
    assert result.rc == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])
