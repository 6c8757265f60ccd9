"""The workarounds of deploy/jupyterhub/team_authenticator.py, each still needed by the packages the hub
image pins (the Workarounds section of deploy/jupyterhub/README.md). When one of these fails, the pinned
nativeauthenticator or JupyterHub changed: re-verify by hand, then remove the workaround, its README
entry and its test here; tests/team/test_hub_accounts.py keeps proving that the login works.

    make test FLAVOR=cpu PYTEST_ARGS="tests/team/test_hub_workarounds.py"
"""
from __future__ import annotations

import pytest

from tests.support.containers import docker
from tests.support.hub import HUB_IMAGE, build_hub_image

pytestmark = pytest.mark.tier("full")


def in_the_hub_image(code: str) -> str:
    build_hub_image()
    ran = docker("run", "--rm", "--network", "none", "--entrypoint", "python3", HUB_IMAGE, "-c", code,
                 timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return ran.stdout.strip()


def test_nativeauthenticators_login_still_times_itself_with_a_statsd_that_jupyterhub_dropped():
    found = in_the_hub_image(
        "import inspect; from jupyterhub.handlers import BaseHandler; from nativeauthenticator import handlers; "
        "print('self.statsd' in inspect.getsource(handlers.LoginHandler.post), hasattr(BaseHandler, 'statsd'))")
    assert found == "True False", (
        f"nativeauthenticator's login no longer needs a statsd that JupyterHub lacks ({found}): remove NoStatsd "
        "from team_authenticator.py and its entry in deploy/jupyterhub/README.md")


def test_nativeauthenticators_login_page_still_refuses_the_arguments_of_jupyterhubs_error_page():
    found = in_the_hub_image(
        "import inspect; from nativeauthenticator import handlers; "
        "print(sorted(inspect.signature(handlers.LoginHandler._render).parameters))")
    assert found == "['login_error', 'self', 'username']", (
        f"nativeauthenticator's LoginHandler._render takes {found} now: remove the _render of "
        "team_authenticator.py's LoginHandler, and its entry in deploy/jupyterhub/README.md, if it takes sync=")
