"""torch.compile's caches in ~/.cache, where the image keeps caches, instead of torch's default
/tmp/torchinductor_USER, which every new container loses.

compose.yaml's `user-cache` volume, a hub's home and a Kubernetes home volume all keep ~/.cache, so a
restarted container, pod or server finds the FX graphs and kernels it compiled before (docs/training.md,
"Warm restarts"). The image's Python runs this at every start (compile-cache.pth, linked with this file into
its site-packages, which the user's own environment reads too), before anything imports torch: so every
way in (command mode, `docker exec`, SSH, JupyterLab's terminals and kernels, code-server) gets the
same folders. A variable the user set wins. Where ~/.cache cannot be written (a uid without a home of
its own), or its disk has under MIN_FREE_BYTES free (a compile there would fail), torch's default stays,
and the trainer says at its first step that its cache is not kept, and why.
Standard library only, and no file system writes: it runs before every Python program in the image.
"""
import os

fell_back = False  # ~/.cache could not be used: torch's default stays (trainer/first_step.py reads this)
why = ""  # what kept ~/.cache from use, in a few words, for the trainer's line
MIN_FREE_BYTES = 256 << 20  # a model's compiled kernels take tens to hundreds of MiB


def writable(folder: str) -> bool:
    """Whether FOLDER can be written, or made: the first part of it that exists is a writable folder. A
    part that exists only as a name (a link to nothing: an HPC home's ~/.cache pointing at scratch that
    is not mounted) cannot be made into a folder, so it ends the search, unwritable."""
    while not os.path.lexists(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            return False
        folder = parent
    return os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK)


def room_in(folder: str) -> int:
    """Bytes free to this user on the disk of FOLDER, or of the nearest part of it that exists."""
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    try:
        status = os.statvfs(folder)
    except OSError:
        return MIN_FREE_BYTES
    return status.f_bavail * status.f_frsize


def keep_compile_caches_in_the_users_cache() -> None:
    """Inductor's cache in ~/.cache/torchinductor, and Triton's (its kernels, Inductor's and a user's own
    @triton.jit ones, otherwise in ~/.triton) in ~/.cache/triton. A TORCHINDUCTOR_CACHE_DIR of the user's
    keeps both where torch puts them then: Triton's inside it."""
    global fell_back, why
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    inductor, triton = os.path.join(cache, "torchinductor"), os.path.join(cache, "triton")
    if not os.path.isabs(cache) or not writable(inductor) or not writable(triton):
        fell_back, why = True, "is not writable"
        return
    if room_in(inductor) < MIN_FREE_BYTES:
        fell_back, why = True, f"has under {MIN_FREE_BYTES >> 20} MiB free"
        return
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor
    os.environ.setdefault("TRITON_CACHE_DIR", triton)
