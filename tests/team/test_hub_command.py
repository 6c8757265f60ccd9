"""A hub that names its own command (DockerSpawner's `cmd=["jupyterhub-singleuser"]`, z2jh's default)
gets the same server as one that keeps the image's CMD: JupyterHub's authentication, the hub's base URL,
and a container that ends with 0 when the server is shut down on purpose. The hub's environment is enough
to show it; tests/team/test_jupyterhub.py runs a whole hub.

    make test FLAVOR=cpu PYTEST_ARGS="tests/team/test_hub_command.py"
"""
from __future__ import annotations

import pytest
import requests

from tests.support import HTTP_TIMEOUT_S, SETTLES_S
from tests.support.waiting import wait_until

pytestmark = pytest.mark.tier("landing")

PREFIX = "/user/alice/"
# What a spawner hands its container. The hub's API is a stub in the container (HUB_API_STUB): the
# server exits unless its hub answers.
HUB_ENV = {"JUPYTERHUB_API_TOKEN": "hub-api-token-7c6b5a4d3e2f1a0b", "JUPYTERHUB_USER": "alice",
           "JUPYTERHUB_CLIENT_ID": "jupyterhub-user-alice", "JUPYTERHUB_API_URL": "http://127.0.0.1:8081/hub/api",
           "JUPYTERHUB_BASE_URL": "/", "JUPYTERHUB_SERVICE_PREFIX": PREFIX,
           "JUPYTERHUB_SERVICE_URL": f"http://0.0.0.0:8888{PREFIX}"}


# A start-up hook that answers the server's version check as the hub would, with the hub's version. The hub
# runs outside the container: its stand-in ends with 0 on the stop's SIGTERM, so it is no work lost.
HUB_API_STUB = """\
setsid python3 -c '
import http.server, jupyterhub, signal, sys
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
class Hub(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("X-JupyterHub-Version", jupyterhub.__version__)
        self.end_headers()
        self.wfile.write(b"{}")
http.server.HTTPServer(("127.0.0.1", 8081), Hub).serve_forever()
' >/dev/null 2>&1 &
disown
"""


def test_a_hub_naming_jupyterhub_singleuser_as_its_command_gets_the_hub_server(containers, tmp_path):
    hooks = tmp_path / "start.d"
    hooks.mkdir()
    (hooks / "10-hub-api.sh").write_text(HUB_API_STUB)
    options = ["--publish", "127.0.0.1::8888", "--volume", f"{hooks}:/etc/container/start.d:ro"]
    for name, value in HUB_ENV.items():
        options += ["--env", f"{name}={value}"]
    container = containers(command=["jupyterhub-singleuser"], options=options)
    api = f"http://127.0.0.1:{container.published_port(8888)}{PREFIX}api"

    def answers() -> bool:
        container.fail_if_exited("the single-user server's start")
        try:
            # Any answer of the server's own under the hub's prefix (a redirect to the hub's login
            # included); a server at "/" answers 404.
            return requests.get(api, timeout=HTTP_TIMEOUT_S, allow_redirects=False).status_code in (200, 302, 401, 403)
        except (requests.ConnectionError, requests.Timeout):  # not up yet, or too busy to answer in time
            return False
    wait_until(answers, SETTLES_S, interval=1, failure=lambda: container.logs()[-3000:])
    logs = container.logs()
    assert "JupyterHub single-user server for hub user 'alice'" in logs and "refuses to start" not in logs, logs[-3000:]
    # The server's name as the stop path sees it (15 bytes): a session holder, stopped last.
    server = container.run("pgrep -x jupyterhub-sing").stdout.split()
    assert len(server) == 1, container.run("ps -eo pid,comm,args").stdout
    # Shut down on purpose (File > Shut Down, the hub's idle culler both end it with 0): the hub gets 0.
    container.run(f"kill -TERM {server[0]}")
    wait_until(lambda: not container.state()["Running"], SETTLES_S, interval=1, failure=lambda: container.logs()[-3000:])
    assert container.state()["ExitCode"] == 0, container.logs()[-3000:]
