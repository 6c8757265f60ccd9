"""Which tests a run selects: the tiers, and the rotating share of what a tier leaves out.

Every test file says its tier once, at its top, and a test that differs from its file says so itself:

    pytestmark = pytest.mark.tier("landing")      # the file's tests protect paths users walk
    @pytest.mark.tier("full")                     # this one is a slow proof: only `make test-all`

- landing: `make test` (the README's test command, what `.ci/run` runs on every change).
- full: every test; `make test-all` and the weekly schedule. A landing test is in the full tier too.
- flavor: the landing tests marked `flavor_difference`, the ones that prove what the GPU flavor's base
  changes (NGC's traits, the environment sessions get, `pip check`); `.ci/run`'s GPU pass on the stand-in.

`--rotation=K/N` adds, to what the tier selects, share K of the tests it leaves out. A file's left-out
tests go together, to share crc32(path) % N, so a module's shared scenario still runs once, and the
share a file lands in stays put when other files come and go. `.ci/run` takes K from the commit, so
every left-out test runs within N landings (docs/testing.md).
"""
from __future__ import annotations

import zlib

TIERS = ("landing", "full", "flavor")
FILE_TIERS = ("landing", "full")  # what a file or a single test may say; "flavor" is a selection


def share_of(path: str, shares: int) -> int:
    """The rotation share of a test file (a path relative to the repository root, with / separators)."""
    return zlib.crc32(path.encode()) % shares


def parse_rotation(text: str) -> tuple[int, int]:
    """'K/N' -> (K, N), with 0 <= K < N; a ValueError that says what to write otherwise."""
    share, _, shares = text.partition("/")
    if not (share.isdigit() and shares.isdigit() and 0 <= int(share) < int(shares)):
        raise ValueError(f"--rotation={text} is not a share: write K/N with 0 <= K < N, for example 2/6")
    return int(share), int(shares)


def in_tier(tier: str, test_tier: str, flavor_difference: bool) -> bool:
    """Whether a test of TEST_TIER (its own mark, else its file's) runs in TIER."""
    if tier == "full":
        return True
    if tier == "flavor":
        return test_tier == "landing" and flavor_difference
    return test_tier == "landing"


def selected(tier: str, test_tier: str, flavor_difference: bool, path: str,
             rotation: tuple[int, int] | None) -> bool:
    """Whether a run of TIER, with ROTATION (share, shares) or none, runs a test of the file at PATH."""
    if in_tier(tier, test_tier, flavor_difference):
        return True
    return rotation is not None and share_of(path, rotation[1]) == rotation[0]
