#!/usr/bin/env python3
"""Merge the locks `make lock` resolved in each platform's base into one file that holds on every platform.

    python3 docker/python/merge_locks.py OUTPUT LOCK_FOR_AMD64 [LOCK_FOR_ARM64 ...]

Each input is uv's hashed output for one platform, named <anything>-<architecture>.lock. A pin every
platform resolved alike is written once, with the hashes of all of them (uv lists every file of the
version, so these are normally the same); a pin only some platforms resolved, or resolved to another
version, is written for each of them with its `platform_machine` marker, which pip evaluates under
--require-hashes. Standard library only: it runs on the host.
"""
from __future__ import annotations

import pathlib
import re
import sys
from typing import NamedTuple

# Debian's architecture names, as platforms and file names give them, and what Python's
# platform.machine() says on each (the value of the platform_machine marker).
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]*?))?\s*\\?$")
HASH = re.compile(r"^\s+--hash=(\S+)")
RESOLVED_IN = "#    resolved in the base of each of"


class Pin:
    """One pinned package of a lock: its requirement, its hashes, and the `# via` lines that follow."""

    def __init__(self, name: str, version: str, marker: str) -> None:
        self.name, self.version, self.marker = name, version, marker
        self.hashes: list[str] = []
        self.comments: list[str] = []

    @property
    def key(self) -> tuple[str, str]:
        """The normalized name, and the marker: a merged lock may pin one package once per machine."""
        return re.sub(r"[-_.]+", "-", self.name).lower(), self.marker

    def lines(self, marker: str) -> list[str]:
        requirement = f"{self.name}=={self.version}" + (f" ; {marker}" if marker else "")
        hashes = [f"    --hash={value}" for value in self.hashes]
        ends = [" \\"] * len(hashes) + [""]
        return [line + end for line, end in zip([requirement, *hashes], ends)] + self.comments


class Lock(NamedTuple):
    header: list[str]  # the comment lines before the first pin
    pins: dict[tuple[str, str], Pin]  # by normalized name and marker
    footer: list[str]  # the comment lines after the last pin's own (uv's list of what it left out)


def parse(text: str) -> Lock:
    """A lock as uv writes it: comments, then pins, each with its hashes and indented `# via` lines."""
    lock, current = Lock([], {}, []), None
    for line in text.splitlines():
        pin = PIN.match(line)
        if pin:
            current = Pin(pin.group(1), pin.group(2), (pin.group(3) or "").strip())
            lock.pins[current.key] = current
        elif current and HASH.match(line):
            current.hashes.append(HASH.match(line).group(1))
        elif current and line.startswith((" ", "\t")) and line.strip().startswith("#"):
            current.comments.append(line)
        elif line.startswith("#"):
            (lock.footer if current else lock.header).append(line)
        elif line.strip():
            raise ValueError(f"a line that is neither a pin, a hash nor a comment: {line!r}")
    return lock


def on_machine(marker: str, machine: str) -> str:
    """MARKER (a pin's own, maybe none) narrowed to one platform_machine."""
    narrowed = f"platform_machine == '{machine}'"
    return f"({marker}) and {narrowed}" if marker else narrowed


def merge(locks: dict[str, str]) -> str:
    """One lock text for LOCKS, {architecture: its lock's text}; the first architecture's header."""
    parsed = {architecture: parse(text) for architecture, text in locks.items()}
    first = next(iter(parsed.values()))
    keys = list(dict.fromkeys(key for lock in parsed.values() for key in lock.pins))
    keys.sort(key=lambda key: key[0])  # by name; one name's pins in the order the locks give them
    header = [line for line in first.header if not line.startswith(RESOLVED_IN)]  # a lock merged before
    out = [*header, f"{RESOLVED_IN} linux/{', linux/'.join(locks)}; a pin that differs names its platform_machine"]
    for key in keys:
        found = {architecture: lock.pins.get(key) for architecture, lock in parsed.items()}
        alike = {(pin.version, pin.marker) for pin in found.values() if pin}
        if None not in found.values() and len(alike) == 1:
            pin = next(iter(found.values()))
            pin.hashes = sorted({value for each in found.values() for value in each.hashes})
            out += pin.lines(pin.marker)
            continue
        for architecture, pin in found.items():
            if pin:
                out += pin.lines(on_machine(pin.marker, MACHINES[architecture]))
    return "\n".join(out + first.footer) + "\n"


def architecture_of(path: pathlib.Path) -> str:
    architecture = path.stem.rpartition("-")[2]
    if architecture not in MACHINES:
        raise ValueError(f"{path.name} does not end in -<architecture>.lock ({', '.join(MACHINES)})")
    return architecture


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    output, inputs = pathlib.Path(argv[1]), [pathlib.Path(name) for name in argv[2:]]
    try:
        merged = merge({architecture_of(path): path.read_text() for path in inputs})
    except (OSError, ValueError) as error:
        print(f"error: cannot merge the locks: {error}; run `make lock` again", file=sys.stderr)
        return 2
    partial = output.with_name(f".{output.name}.partial")
    partial.write_text(merged)
    partial.replace(output)
    print(f"wrote {output} ({len(parse(merged).pins)} pins, for {', '.join(map(architecture_of, inputs))})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
