"""The user's key that signs the compiled code a run saves, so that a resume loads only what this user's
own runs wrote (trainer/compiled_code.py).

Compiled code is a pickle: loading it runs it. A checksum beside the data finds damage, not a writer, so
the file also carries an HMAC made with a key that lives outside the checkpoint folder: in the user's
cache (~/.cache/train_ddp/compiled-code.key, which the image keeps on the user-cache volume and a Slurm
home shares between nodes), or in the file COMPILED_CODE_KEY_FILE names (a Kubernetes Secret that every
pod of a job mounts). The key is read only as OpenSSH reads a private key: a regular file of this user's,
that nobody else can read or write, never through a link.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import pathlib
import secrets

from trainer.bounded_read import RefusedFile, read_regular_file

KEY_FILE_VARIABLE = "COMPILED_CODE_KEY_FILE"
KEY_BYTES = 32


class KeyUnusable(Exception):
    """The key file exists but cannot be trusted or read; the message says why and what to do."""


def key_path() -> pathlib.Path:
    if os.environ.get(KEY_FILE_VARIABLE):
        return pathlib.Path(os.environ[KEY_FILE_VARIABLE])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(cache) / "train_ddp" / "compiled-code.key"


def read_key(path: pathlib.Path) -> bytes | None:
    """The key in PATH, or None where there is none. Raises KeyUnusable for a key that is not private.

    As OpenSSH reads a private key: the owner is you, or root (a platform's mounted Secret); nobody else
    may write it, nor read it unless in its group (Kubernetes gives a Secret to the pod's fsGroup). A link
    is followed only in the path you named yourself (a Kubernetes Secret's file is one); in the default
    place it is refused."""
    if os.environ.get(KEY_FILE_VARIABLE):
        path = pathlib.Path(os.path.realpath(path))
    try:
        data, status = read_regular_file(path, limit=KEY_BYTES)
    except FileNotFoundError:
        return None
    except RefusedFile as refused:
        raise KeyUnusable(f"the key {path} {refused}; remove it (a new one is made)") from None
    except OSError as error:
        raise KeyUnusable(f"the key {path} is unreadable ({error.strerror})") from None
    if status.st_uid not in (os.geteuid(), 0):
        raise KeyUnusable(f"the key {path} belongs to uid {status.st_uid}, not to you (uid {os.geteuid()}) or "
                          f"root; remove it (a new one is made)")
    if status.st_mode & 0o026:
        raise KeyUnusable(f"the key {path} is open to others (mode {status.st_mode & 0o777:o}); "
                          f"chmod 600 it if only you could ever have written it, else remove it")
    if len(data) != KEY_BYTES:
        raise KeyUnusable(f"the key {path} is not a key ({len(data)} bytes, not {KEY_BYTES}); remove it "
                          f"(a new one is made)")
    return data


def read_or_make_key(path: pathlib.Path) -> bytes:
    """The key in PATH, made first where there is none. The local ranks of a node may make it at the same
    moment: each writes a private file of its own and links it into place; the first link wins, and every
    rank then reads the winner's."""
    key = read_key(path)
    if key is not None:
        return key
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    candidate = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    descriptor = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(secrets.token_bytes(KEY_BYTES))
        try:
            os.link(candidate, path)
        except FileExistsError:
            pass
    finally:
        candidate.unlink(missing_ok=True)
    key = read_key(path)
    if key is None:
        raise KeyUnusable(f"the key {path} vanished as it was made")
    return key


def signature(key: bytes, identity: dict, sha256: str) -> str:
    """The HMAC over what the header claims: the build the code is for, and the digest of the code."""
    claims = json.dumps({"identity": identity, "sha256": sha256}, sort_keys=True).encode()
    return hmac.new(key, claims, hashlib.sha256).hexdigest()


def signed_by(key: bytes, identity: dict, sha256: str, recorded: object) -> bool:
    return isinstance(recorded, str) and hmac.compare_digest(signature(key, identity, sha256), recorded)
