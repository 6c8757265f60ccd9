"""A Jupyter server driven the way JupyterLab in a browser drives it: kernels and terminals over their
websockets, through whatever stands in front of the server (a reverse proxy, a hub's proxy, a prefix).

A JupyterAccess carries the server's base URL and how this client authenticates there: a token header,
or a logged-in requests.Session's cookies (with the _xsrf cookie that cookie-authenticated POSTs need).
"""
from __future__ import annotations

import dataclasses
import json
import urllib.parse
import uuid

import requests
import websocket

from tests.support import HTTP_TIMEOUT_S

TIMEOUT_S = 120


@dataclasses.dataclass
class JupyterAccess:
    base_url: str  # http://host:port/prefix/ (with the trailing slash)
    session: requests.Session = dataclasses.field(default_factory=requests.Session)
    token: str = ""
    ca_bundle: str = ""  # the proxy's certificate, for https:// base URLs

    def cookies(self) -> dict[str, str]:
        """The session's cookies a browser sends to this server: where a hub and a user's server each set
        an _xsrf cookie, the one whose path is the longest prefix of the server's path wins."""
        path = urllib.parse.urlparse(self.base_url).path
        matching = sorted((cookie for cookie in self.session.cookies if path.startswith(cookie.path or "/")),
                          key=lambda cookie: len(cookie.path or "/"))
        return {cookie.name: cookie.value for cookie in matching}

    def headers(self) -> dict[str, str]:
        headers = {"Authorization": f"token {self.token}"} if self.token else {}
        xsrf = self.cookies().get("_xsrf")
        return {**headers, **({"X-XSRFToken": xsrf} if xsrf else {})}

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        # verify per request: a session's own is overridden by REQUESTS_CA_BUNDLE from the environment.
        return self.session.request(method, self.base_url + path, headers=self.headers(), timeout=HTTP_TIMEOUT_S,
                                    verify=self.ca_bundle or True, **kwargs)

    def post(self, path: str, **kwargs) -> requests.Response:
        return self.request("POST", path, **kwargs)

    def get(self, path: str, **kwargs) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def connect(self, path: str) -> websocket.WebSocket:
        """Opens the websocket at PATH with this client's credentials, as a browser on that page would."""
        url = "ws" + self.base_url.removeprefix("http") + path
        cookie = "; ".join(f"{name}={value}" for name, value in self.cookies().items())
        header = [f"{name}: {value}" for name, value in self.headers().items()]
        return websocket.create_connection(url, timeout=TIMEOUT_S, header=header, cookie=cookie or None,
                                           sslopt={"ca_certs": self.ca_bundle} if self.ca_bundle else None)


def execute_message(code: str, session_id: str) -> dict:
    return {
        "header": {"msg_id": uuid.uuid4().hex, "msg_type": "execute_request", "username": "test",
                   "session": session_id, "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True},
    }


def run_in_kernel(access: JupyterAccess, code: str) -> str:
    """Starts a python3 kernel, runs CODE over the kernel's websocket, returns what it printed; fails on an
    error reply. The kernel is shut down afterwards."""
    started = access.post("api/kernels", json={"name": "python3"})
    assert started.status_code == 201, f"starting a kernel: {started.status_code} {started.text[:300]}"
    kernel_id = started.json()["id"]
    session_id = uuid.uuid4().hex
    connection = access.connect(f"api/kernels/{kernel_id}/channels?session_id={session_id}")
    try:
        request = execute_message(code, session_id)
        connection.send(json.dumps(request))
        output, reply, idle = [], None, False
        while reply is None or not idle:
            message = json.loads(connection.recv())
            if message["parent_header"].get("msg_id") != request["header"]["msg_id"]:
                continue
            kind, content = message["header"]["msg_type"], message["content"]
            if kind == "stream":
                output.append(content["text"])
            elif kind == "error":
                output.append("\n".join(content["traceback"]))
            elif kind == "execute_reply":
                reply = content
            elif kind == "status":
                idle = content["execution_state"] == "idle"
        text = "".join(output)
        assert reply["status"] == "ok", f"the kernel failed: {text}"
        return text
    finally:
        connection.close()
        access.request("DELETE", f"api/kernels/{kernel_id}")


def run_in_terminal(access: JupyterAccess, command: str, until: str, timeout: float = TIMEOUT_S) -> str:
    """Opens a JupyterLab terminal, types COMMAND, and returns the terminal's output once UNTIL appears in
    it. The terminal echoes what is typed, so UNTIL must be printed by the command without standing in
    it literally (echo "done""-1" prints done-1). The terminal stays open: what it started keeps running."""
    created = access.post("api/terminals")
    assert created.status_code == 200, f"opening a terminal: {created.status_code} {created.text[:300]}"
    connection = access.connect(f"terminals/websocket/{created.json()['name']}")
    connection.settimeout(timeout)
    connection.send(json.dumps(["stdin", command + "\r"]))
    seen = ""
    while until not in seen.replace("\r", ""):
        kind, *data = json.loads(connection.recv())
        if kind == "stdout":
            seen += data[0]
    return seen
