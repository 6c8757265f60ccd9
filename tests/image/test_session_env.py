"""SSH sessions get the environment a training session needs, and no secret given to the container:
the file they read (/etc/container/session-env.sh) holds the image's variables, what start-up hooks
export, and given variables only when named like training settings.

    make test-image PYTEST_ARGS=tests/image/test_session_env.py
"""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.tier("landing"), pytest.mark.flavor_difference]

SECRETS = {"GITHUB_PAT": "ghp_pat_value_0123", "DATABASE_URL": "postgres://app:db-password-4567@db/app",
           "HF_TOKEN": "hf_token_value_89ab"}
NEEDED = {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "3", "HF_HOME": "/workspace/hf"}


def test_sessions_get_training_settings_and_hook_exports_but_no_secret(containers, tmp_path):
    hooks = tmp_path / "start.d"
    hooks.mkdir()
    (hooks / "10-export.sh").write_text("export PROJECT_DATA=/workspace/data\n")
    options = ["--env", "ENABLE_JUPYTER=0", "--volume", f"{hooks}:/etc/container/start.d:ro"]
    for name, value in {**SECRETS, **NEEDED}.items():
        options += ["--env", f"{name}={value}"]
    container = containers(options=options)
    contents = container.run("cat /etc/container/session-env.sh", user=None).stdout
    for name, value in SECRETS.items():
        assert value not in contents, f"{name} was written into the sessions' file"
    for name, value in {**NEEDED, "PROJECT_DATA": "/workspace/data"}.items():
        assert f"export {name}='{value}'" in contents, contents
    # The image's own variables, whatever their names.
    assert "export JUPYTER_CONTAINER_PORT='8888'" in contents and "export PATH='" in contents, contents


def test_credentials_in_a_url_never_reach_the_sessions_file(containers, tmp_path):
    """PIP_INDEX_URL is a build argument, not a variable of the image: given at run time with a password
    it stays out; and a URL with credentials stays out under any name, even one a hook exported."""
    hooks = tmp_path / "start.d"
    hooks.mkdir()
    (hooks / "10-mirror.sh").write_text("export DATA_MIRROR=https://reader:mirror-pass-cdef@mirror.example/data\n")
    pip_index = "https://build:pip-pass-0123@pypi.example/simple"
    container = containers(options=["--env", "ENABLE_JUPYTER=0", "--env", f"PIP_INDEX_URL={pip_index}",
                                    "--volume", f"{hooks}:/etc/container/start.d:ro"])
    contents = container.run("cat /etc/container/session-env.sh", user=None).stdout
    assert "pip-pass-0123" not in contents and "mirror-pass-cdef" not in contents, contents
    names = container.run("cat /usr/local/lib/container/image-env-names", user=None).stdout.split()
    assert not {"PIP_INDEX_URL", "FLAVOR", "USER_UID", "USER_GID"} & set(names), names
