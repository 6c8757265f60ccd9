#!/usr/bin/env python3
"""The images a release publishes for IMAGE: IMAGE itself and, when it was built from the same commit, its
-vscode variant (make build VSCODE=1). One reference a line, for the release targets' loops.

    python3 tools/release/variants.py pytorch-dev:cpu-latest

A variant from another commit is left out with one line on stderr: publishing it beside this release would
give last week's editor this week's tags.
"""
from __future__ import annotations

import subprocess
import sys

from tags import REVISION_LABEL, VSCODE_SUFFIX, read_labels, run_command


def release_images(image: str) -> list[str]:
    variant = image + VSCODE_SUFFIX
    if image.endswith(VSCODE_SUFFIX) or subprocess.run(["docker", "image", "inspect", variant], capture_output=True,
                                                       timeout=60, check=False).returncode != 0:
        return [image]
    ours, theirs = read_labels(image).get(REVISION_LABEL), read_labels(variant).get(REVISION_LABEL)
    if ours != theirs:
        print(f"variants.py: leaving out {variant}: it was built from {str(theirs)[:12]}, not {str(ours)[:12]}; "
              f"make build VSCODE=1 to publish it with this release", file=sys.stderr)
        return [image]
    return [image, variant]


def main(argv: list[str]) -> int:
    return run_command(argv, "variants.py IMAGE   (IMAGE, and its -vscode variant when built from the same commit)",
                       lambda image: print("\n".join(release_images(image))))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
