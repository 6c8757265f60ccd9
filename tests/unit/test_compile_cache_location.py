"""torch.compile's caches go where the image keeps caches, ~/.cache, unless the user chose a folder or
~/.cache cannot be written (docker/rootfs/usr/local/lib/container/python-hooks/container_compile_cache.py, which the
image's compile-cache.pth runs at every Python start). tests/image/test_compile_cache.py checks every way
into a container.

    make test-unit PYTEST_ARGS=tests/unit/test_compile_cache_location.py
"""
from __future__ import annotations

import pytest

import container_compile_cache

VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "XDG_CACHE_HOME")


@pytest.fixture
def home(tmp_path, monkeypatch):
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def chosen() -> tuple[str | None, str | None]:
    import os
    return os.environ.get("TORCHINDUCTOR_CACHE_DIR"), os.environ.get("TRITON_CACHE_DIR")


def test_the_caches_go_under_the_users_cache_folder_even_before_it_exists(home):
    container_compile_cache.keep_compile_caches_in_the_users_cache()
    assert chosen() == (f"{home}/.cache/torchinductor", f"{home}/.cache/triton")
    assert not (home / ".cache").exists()  # nothing written at a Python start: torch makes them when it compiles


def test_xdg_cache_home_is_the_cache_folder_when_set(home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    container_compile_cache.keep_compile_caches_in_the_users_cache()
    assert chosen() == (f"{tmp_path}/xdg/torchinductor", f"{tmp_path}/xdg/triton")


def test_the_users_own_folder_wins_and_keeps_triton_inside_it_as_torch_does(home, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/scratch/inductor")
    container_compile_cache.keep_compile_caches_in_the_users_cache()
    assert chosen() == ("/scratch/inductor", None)


def test_a_triton_folder_of_the_users_wins(home, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", "/scratch/triton")
    container_compile_cache.keep_compile_caches_in_the_users_cache()
    assert chosen() == (f"{home}/.cache/torchinductor", "/scratch/triton")


@pytest.mark.parametrize("where", ["/", "relative/home"])
def test_a_home_that_cannot_be_written_leaves_torchs_default(home, monkeypatch, where):
    """`docker run --user 12345` gets HOME=/ (not writable for that uid; as root the test uses a file)."""
    if where == "/":
        blocker = home / "not-a-folder"
        blocker.write_text("")
        monkeypatch.setenv("HOME", str(blocker))  # ~/.cache under a file: never writable, for root too
    else:
        monkeypatch.setenv("HOME", where)
    container_compile_cache.keep_compile_caches_in_the_users_cache()
    assert chosen() == (None, None)



@pytest.mark.parametrize("link", [".cache", ".cache/torchinductor", ".cache/triton"])
def test_a_cache_folder_that_is_a_link_to_nothing_leaves_torchs_default(home, monkeypatch, link):
    """An HPC home's ~/.cache pointing at scratch that is not mounted: every compile failed there, where
    torch's own default would have worked."""
    monkeypatch.setattr(container_compile_cache, "fell_back", False)
    if link != ".cache":
        (home / ".cache").mkdir()
    (home / link).symlink_to(home.parent / "unmounted-scratch" / link)
    container_compile_cache.keep_compile_caches_in_the_users_cache()
    assert chosen() == (None, None) and container_compile_cache.fell_back


def test_a_cache_that_is_a_link_to_a_folder_is_used(home, tmp_path):
    (tmp_path / "scratch").mkdir()
    (home / ".cache").symlink_to(tmp_path / "scratch")
    container_compile_cache.keep_compile_caches_in_the_users_cache()
    assert chosen() == (f"{home}/.cache/torchinductor", f"{home}/.cache/triton")


def test_a_cache_disk_with_too_little_room_leaves_torchs_default_and_says_why(home, monkeypatch):
    """A full home volume: every compile into it failed on ENOSPC, where torch's default would have worked.
    (The real full disk is tests/image/test_compile_cache.py's; here the threshold is past any disk's size.)"""
    monkeypatch.setattr(container_compile_cache, "MIN_FREE_BYTES", 1 << 62)
    monkeypatch.setattr(container_compile_cache, "fell_back", False)
    monkeypatch.setattr(container_compile_cache, "why", "")
    container_compile_cache.keep_compile_caches_in_the_users_cache()
    assert chosen() == (None, None) and container_compile_cache.fell_back
    assert container_compile_cache.why == f"has under {(1 << 62) >> 20} MiB free"
