#!/usr/bin/env python3
"""Render a manifest of deploy/kubernetes with the image named by digest, never a moving tag.

    python3 tools/deploy/render_image.py deploy/kubernetes/pytorchjob.yaml REPOSITORY@sha256:... > job.yaml
    kubectl apply -f job.yaml

Every `image:` line of the manifest gets the digest reference; the rest of the file (comments, the
YAML anchors that give the Worker the Master's template) stays as it is, so the rendered file reads
like the one in the repository. With kustomize, an `images:` entry with `digest:` does the same.
A reference without a digest, or a manifest with no `image:` line, ends in one line (exit 2).
"""
from __future__ import annotations

import pathlib
import re
import sys

DIGEST_REFERENCE = re.compile(r"^[a-z0-9][\w.:/-]*@sha256:[0-9a-f]{64}$")
IMAGE_LINE = re.compile(r"^(\s*(?:- )?image:\s*)(\S+)(.*)$")


class RenderError(Exception):
    """What is wrong with the input; the one line the user reads."""


def render(manifest: str, reference: str) -> str:
    if not DIGEST_REFERENCE.match(reference):
        raise RenderError(f"{reference!r} is not a digest reference (REPOSITORY@sha256:<64 hex>): resolve the tag "
                          "first (python3 tools/regression/resolve.py REF prints it)")
    lines, replaced = [], 0
    for line in manifest.splitlines(keepends=True):
        match = IMAGE_LINE.match(line.rstrip("\n"))
        if match:
            comment = f"   # pinned by digest; the tag in the repository was {match[2]}\n"
            line, replaced = f"{match[1]}{reference}{comment}", replaced + 1
        lines.append(line)
    if not replaced:
        raise RenderError("the manifest has no `image:` line: give one of deploy/kubernetes/ (pytorchjob.yaml, trainjob.yaml)")
    return "".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: render_image.py MANIFEST REPOSITORY@sha256:DIGEST", file=sys.stderr)
        return 2
    try:
        print(render(pathlib.Path(argv[1]).read_text(), argv[2]), end="")
    except (RenderError, OSError) as error:
        print(f"render_image.py: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
