"""torch.compile's caches live where the image keeps caches, ~/.cache (compose's `user-cache` volume, a
hub's home), for every way into the container, so a new container compiles warm; a folder the user chose
wins, and a uid that cannot write a home of its own keeps torch's default (container_compile_cache.py).
SSH sessions: tests/image/test_ssh.py.

    make test-image PYTEST_ARGS=tests/image/test_compile_cache.py
"""
from __future__ import annotations

import shlex

import pytest

from tests.support.containers import run_container_to_completion
from tests.support.notebook_kernel import run_in_a_notebook_kernel

pytestmark = pytest.mark.tier("landing")

TOKEN = "compile-cache-token-5e4d3c2b1a"
# What torch itself resolves: Inductor's cache folder, and where Inductor puts Triton's kernels.
WHERE = ("from torch._inductor.runtime.cache_dir_utils import cache_dir, triton_cache_dir; "
         "print(cache_dir(), triton_cache_dir(0))")
KEPT = "/home/dev/.cache/torchinductor /home/dev/.cache/triton"


def test_every_way_in_compiles_into_the_users_cache(containers):
    container = containers(options=["--publish", "127.0.0.1::8888", "--env", f"JUPYTER_TOKEN={TOKEN}"])
    container.wait_until_healthy()
    probe = f"python -c {shlex.quote(WHERE)}"
    # docker exec runs the image's Python; a login shell (JupyterLab's and VS Code's terminals, bash -l)
    # runs the user's own environment's (user-packages), which reads the image's .pth files too.
    for way, command in {"docker exec": probe, "a login shell": f"bash -lc {shlex.quote(probe)}"}.items():
        result = container.run(command)
        assert result.rc == 0 and result.stdout.split()[-2:] == KEPT.split(), f"{way}: {result.stdout}{result.stderr}"

    # A notebook's kernel, itself: what it compiles in a cell lands there too.
    folders = KEPT.split()
    cell = (f"from torch._inductor.runtime.cache_dir_utils import cache_dir, triton_cache_dir\n"
            f"assert [cache_dir(), triton_cache_dir(0)] == {folders!r}, [cache_dir(), triton_cache_dir(0)]")
    reply = run_in_a_notebook_kernel(container, f"http://127.0.0.1:{container.published_port(8888)}", TOKEN, cell)
    assert reply["status"] == "ok", reply


    # `docker exec --user` with a uid the image does not know gets HOME=/, which it cannot write: torch's
    # own default stays, in /tmp (and the trainer's first-step line says it is not kept).
    result = container.run(probe, user="12345:12345")
    assert result.rc == 0 and result.stdout.split()[-2:] == [
        "/tmp/torchinductor_uid_12345", "/tmp/torchinductor_uid_12345/triton/0"], result.stdout + result.stderr


@pytest.mark.parametrize("options, expected", [
    ([], KEPT),
    (["--env", "TORCHINDUCTOR_CACHE_DIR=/workspace/inductor"], "/workspace/inductor /workspace/inductor/triton/0"),
    # Start-up gives a uid without a writable home one of its own, /tmp/home-UID (start/user.sh).
    (["--user", "12345:12345"], "/tmp/home-12345/.cache/torchinductor /tmp/home-12345/.cache/triton"),
    # A ~/.cache on a disk with little left, as a full home volume: a compile there would fail on ENOSPC.
    (["--tmpfs", "/home/dev/.cache:size=1m,uid=1000,gid=1000"], "/tmp/torchinductor_dev /tmp/torchinductor_dev/triton/0"),
], ids=["command-mode", "users-own-folder", "any-uid", "nearly-full-cache"])
def test_command_mode_compiles_into_the_users_cache_unless_told_otherwise(image, options, expected):
    result = run_container_to_completion(image, ["python", "-c", WHERE], options=options)
    assert result.returncode == 0 and result.stdout.split()[-2:] == expected.split(), result.stdout + result.stderr
