"""Checks JUPYTER_PASSWORD_HASH before JupyterLab starts with it (start/jupyter.sh runs this).

Exit 0: a usable hash of a non-empty password. 3: the hash of the empty password, which would let anyone
in. 4: not a hash Jupyter can check, so nobody could log in. Only the image's own packages are needed.
"""
import os
import re
import sys

from jupyter_server.auth.security import passwd_check

EMPTY_PASSWORD, UNUSABLE = 3, 4
# Jupyter's salted hashes (the older format): algorithm:salt:hexdigest.
HEX_DIGEST_LENGTHS = {"sha1": 40, "sha256": 64, "sha512": 128}


def usable(password_hash: str) -> bool:
    algorithm, _, rest = password_hash.partition(":")
    if algorithm == "argon2":
        import argon2  # installed with jupyter_server

        try:
            parameters = argon2.extract_parameters(rest)
        except argon2.exceptions.InvalidHashError:
            return False
        encoded_hash = rest.rsplit("$", 1)[-1]
        return parameters.hash_len >= 16 and len(encoded_hash) >= 22  # 16 bytes in unpadded base64
    salt, _, digest = rest.partition(":")
    length = HEX_DIGEST_LENGTHS.get(algorithm, -1)
    return bool(salt) and re.fullmatch(f"[0-9a-f]{{{length}}}", digest) is not None


def main() -> int:
    password_hash = os.environ["JUPYTER_PASSWORD_HASH"]
    if not usable(password_hash):
        return UNUSABLE
    try:
        return EMPTY_PASSWORD if passwd_check(password_hash, "") else 0
    except Exception:  # a hash that parses yet cannot be verified is as unusable as garbage
        return UNUSABLE


if __name__ == "__main__":
    sys.exit(main())
