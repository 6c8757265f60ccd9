"""Walks over a tree of processes, by parent: the one place the stop, the process table and JupyterLab's
extension climb to a parent or descend to children. Pure functions; a walk stops after MAX_DEPTH
levels, since a table read while processes came and went may hold a loop of parents.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping

MAX_DEPTH = 64


def ancestors(parent_of: Callable[[int], int | None], pid: int) -> Iterator[int]:
    """PID's parent, its parent's parent, and so on, while PARENT_OF knows them (None: gone)."""
    for _ in range(MAX_DEPTH):
        parent = parent_of(pid)
        if parent is None:
            return
        yield parent
        pid = parent


def descends(parent_of: Callable[[int], int | None], pid: int, ancestor: int) -> bool:
    return ancestor in ancestors(parent_of, pid)


def children_of(parents: Mapping[int, int]) -> dict[int, list[int]]:
    """Each PID's children, from each process's parent (PARENTS)."""
    found: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        found.setdefault(parent, []).append(pid)
    return found


def descendants(children: Mapping[int, list[int]], pid: int,
                within: Collection[int] | None = None) -> list[int]:
    """PID's descendants, level by level. With WITHIN, only those reached through processes in it: each
    branch ends at its first process outside it."""
    found, frontier = [], [pid]
    for _ in range(MAX_DEPTH):
        frontier = [child for parent in frontier for child in children.get(parent, ())
                    if within is None or child in within]
        if not frontier:
            break
        found += frontier
    return found
