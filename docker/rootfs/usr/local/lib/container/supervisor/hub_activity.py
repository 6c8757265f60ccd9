"""Telling a hub that the user's work runs, so its idle culler leaves a server with a trainer alone."""
from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from datetime import datetime, timezone

import process_kinds
import process_table
import stop_policy
from run_folder import warn


class HubActivity:
    """Under a hub, every JUPYTERHUB_ACTIVITY_INTERVAL seconds (the variable jupyterhub-singleuser reads
    too): when some of the user's work was running at the last look and still is (so a healthcheck or a
    `docker exec ls` does not count), posts now as the server's last activity to the hub's activity API,
    with the server's own token. jupyterhub-singleuser reports only what JupyterLab itself sees."""

    def __init__(self, container: process_kinds.Container) -> None:
        self.container = container
        self.interval_s = self.read_interval()
        user = os.environ.get("JUPYTERHUB_USER", "")
        self.url = f"{os.environ['JUPYTERHUB_API_URL']}/users/{user}/activity"
        self.due = time.monotonic() + self.interval_s
        self.seen: set[int] = set()

    @staticmethod
    def read_interval() -> float:
        value = os.environ.get("JUPYTERHUB_ACTIVITY_INTERVAL", "300")
        try:
            if 1 <= float(value) <= 86400:
                return float(value)
        except ValueError:
            pass
        warn(f"JUPYTERHUB_ACTIVITY_INTERVAL='{value}' is not a number of seconds from 1 to 86400: "
             "reporting your running work to the hub every 300 s")
        return 300.0

    def seconds_left(self) -> float:
        return max(0.0, self.due - time.monotonic())

    def look(self) -> None:
        self.due = time.monotonic() + self.interval_s
        work = stop_policy.user_work(process_table.snapshot(self.container, pipes=False), self.container)
        if work & self.seen:
            threading.Thread(target=self.post, daemon=True).start()  # a slow hub never delays a stop
        self.seen = work

    def post(self) -> None:
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        server = os.environ.get("JUPYTERHUB_SERVER_NAME", "")
        body = {"last_activity": now, "servers": {server: {"last_activity": now}}}
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), method="POST", headers={
            "Authorization": f"token {os.environ['JUPYTERHUB_API_TOKEN']}",
            "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30):
                pass
        except OSError as error:
            warn(f"could not tell the hub that your work runs ({self.url}: {error}); "
                 "its idle culler may stop this server")
