"""The packages docker/python/left-out.txt names are not in the image, `pip check` is clean without them,
and the reason each is left out still holds.

    make test PYTEST_ARGS="tests/image/test_left_out_packages.py"

When a "still needed" test fails, its message names the entry: remove it from left-out.txt and this
file's check of it, as docs/torch-workarounds.md does for its entries.
"""
from __future__ import annotations

import re

import pytest

from tests.support import REPO_ROOT

pytestmark = pytest.mark.tier("full")

LEFT_OUT = [line.strip() for line in (REPO_ROOT / "docker" / "python" / "left-out.txt").read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
# What JupyterLab's server imports at every start (jupyter-events, and through it jsonschema).
SERVER_IMPORT = "import jupyter_server.serverapp"


@pytest.fixture(scope="module")
def container(training_container):
    return training_container


def test_the_list_names_packages():
    assert LEFT_OUT and all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) for name in LEFT_OUT), LEFT_OUT


@pytest.mark.parametrize("package", LEFT_OUT)
def test_a_left_out_package_is_not_installed(container, package):
    result = container.run(f"pip show {package}")
    assert result.rc != 0, f"{package} is installed although docker/python/left-out.txt leaves it out: {result.stdout}"


def test_jupyterlab_still_imports_and_pip_check_is_clean_without_them(container):
    result = container.run(f"python -c '{SERVER_IMPORT}' && pip check")
    assert result.rc == 0, result.stdout + result.stderr


def test_still_needed_jupyter_servers_import_rfc3987_syntax_when_it_is_there(container):
    """A stand-in rfc3987_syntax first on the path records that it was imported, then refuses, as a missing
    package would. While the server's imports reach it, the real one would cost its parsers at every start."""
    probe = ("d=$(mktemp -d) && printf 'import os\\nopen(os.environ[\"PROBE_MARK\"], \"w\").close()\\n"
             "raise ImportError(\"probe\")\\n' > \"$d/rfc3987_syntax.py\" && "
             f"PROBE_MARK=\"$d/imported\" PYTHONPATH=\"$d\" python -c '{SERVER_IMPORT}' && test -e \"$d/imported\"")
    result = container.run(probe)
    assert result.rc == 0, ("jupyter_server no longer imports rfc3987_syntax at start: rfc3987-syntax (and lark) "
                            "can leave docker/python/left-out.txt " + result.stdout + result.stderr)
