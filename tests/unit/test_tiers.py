"""The tiers (tests/support/tiers.py): every test file says its tier, every suite keeps a test in the
landing tier, and the selection and rotation rules.

The tiers are read from the test files' text (the marks), so this runs without Docker or an image.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support import REPO_ROOT
from tests.support.tiers import FILE_TIERS, parse_rotation, selected, share_of
from tests.unit.test_maps import suites

SUITE_TEST_FILES = sorted(path for suite in suites() for path in (REPO_ROOT / "tests" / suite).glob("test_*.py"))


def relative(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


def marks(node: ast.expr) -> list[tuple[str, list[object]]]:
    """The pytest marks an expression names: pytest.mark.NAME or pytest.mark.NAME(ARGS), or a list of them."""
    found = []
    for part in node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]:
        call = part if isinstance(part, ast.Call) else None
        target = call.func if call else part
        if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "pytest.mark":
            # Only a tier's argument is read; other marks' arguments may name variables.
            args = [ast.literal_eval(arg) for arg in call.args] if call and target.attr == "tier" else []
            found.append((target.attr, args))
    return found


def file_marks(tree: ast.Module) -> list[tuple[str, list[object]]]:
    """The marks of a module's `pytestmark`, which apply to each of its tests."""
    return [mark for statement in tree.body
            if isinstance(statement, ast.Assign) and [ast.unparse(t) for t in statement.targets] == ["pytestmark"]
            for mark in marks(statement.value)]


def file_tier(tree: ast.Module) -> str | None:
    return next((args[0] for name, args in file_marks(tree) if name == "tier"), None)


def functions_and_marks(tree: ast.Module) -> dict[str, list[tuple[str, list[object]]]]:
    """Each test function of a module (classes included) -> the marks on it."""
    return {node.name: [mark for decorator in node.decorator_list for mark in marks(decorator)]
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")}


def tiers_of_tests(path: Path) -> dict[str, tuple[str | None, set[str]]]:
    """Each test of the file at PATH -> (its tier: its own mark, else its file's; the other marks it has)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    default, of_file = file_tier(tree), {mark for mark, _ in file_marks(tree)}
    result = {}
    for name, function_marks in functions_and_marks(tree).items():
        own = [args[0] for mark, args in function_marks if mark == "tier"]
        result[name] = (own[0] if own else default, of_file | {mark for mark, _ in function_marks})
    return result


@pytest.mark.parametrize("path", SUITE_TEST_FILES, ids=relative)
def test_every_test_file_belongs_to_a_tier(path: Path) -> None:
    tier = file_tier(ast.parse(path.read_text(encoding="utf-8")))
    assert tier in FILE_TIERS, (
        f"{relative(path)} belongs to no tier: put `pytestmark = pytest.mark.tier(\"landing\")` (a path users "
        "walk) or `pytest.mark.tier(\"full\")` (a slow proof) at its top; docs/contributing.md says which")
    for name, (own, _) in tiers_of_tests(path).items():
        assert own in FILE_TIERS, f"{relative(path)}::{name} has tier {own!r}: use one of {FILE_TIERS}"


@pytest.mark.parametrize("suite", suites())
def test_every_suite_keeps_a_test_in_the_landing_tier(suite: str) -> None:
    landing = [f"{relative(path)}::{name}" for path in (REPO_ROOT / "tests" / suite).glob("test_*.py")
               for name, (tier, _) in tiers_of_tests(path).items() if tier == "landing"]
    assert landing, (f"tests/{suite} has no test in the landing tier: `make test` would never run it; mark "
                     "the test of its main scenario `tier(\"landing\")`")


@pytest.mark.parametrize("path", SUITE_TEST_FILES, ids=relative)
def test_gpu_and_flavor_tests_are_landing_tests_of_the_image(path: Path) -> None:
    """The GPU checks are what a GPU host's `make test` exists for, and the flavor tier is a part of the
    landing tier that runs on the GPU flavor's image."""
    for name, (tier, other_marks) in tiers_of_tests(path).items():
        if "gpu" in other_marks:
            assert tier == "landing", f"{relative(path)}::{name} is a GPU check: it belongs to the landing tier"
        if "flavor_difference" in other_marks:
            assert tier == "landing", f"{relative(path)}::{name} is a flavor difference: mark it landing"
            assert relative(path).split("/")[1] in ("image", "runtimes"), (
                f"{relative(path)}::{name}: the GPU pass runs tests/image and tests/runtimes only")


def test_the_gpu_pass_has_flavor_differences_to_run() -> None:
    marked = [name for path in SUITE_TEST_FILES for name, (_, other) in tiers_of_tests(path).items()
              if "flavor_difference" in other]
    assert marked, "no test is marked flavor_difference: .ci/run's GPU pass would test nothing"


@pytest.mark.parametrize(("tier", "test_tier", "flavor_difference", "expected"), [
    ("landing", "landing", False, True),
    ("landing", "full", False, False),
    ("full", "full", False, True),
    ("full", "landing", True, True),
    ("flavor", "landing", True, True),
    ("flavor", "landing", False, False),
    ("flavor", "full", True, False),
])
def test_a_tier_selects_its_tests(tier: str, test_tier: str, flavor_difference: bool, expected: bool) -> None:
    assert selected(tier, test_tier, flavor_difference, "tests/x/test_y.py", None) is expected


def test_the_rotation_adds_each_left_out_file_to_exactly_one_share() -> None:
    shares = 6
    for path in map(relative, SUITE_TEST_FILES):
        chosen = [share for share in range(shares)
                  if selected("landing", "full", False, path, (share, shares))]
        assert chosen == [share_of(path, shares)], path


def test_every_share_of_the_rotation_holds_tests() -> None:
    """.ci/run's six shares over the files whose tests the landing tier leaves out: none is empty, so
    no landing runs a share of nothing."""
    shares = int(re.search(r"^readonly ROTATION_SHARES=(\d+)$", (REPO_ROOT / ".ci" / "run").read_text(), re.M)[1])
    left_out = [relative(path) for path in SUITE_TEST_FILES
                if any(tier == "full" for tier, _ in tiers_of_tests(path).values())]
    assert {share_of(path, shares) for path in left_out} == set(range(shares))


@pytest.mark.parametrize("text", ["6/6", "-1/6", "1", "a/b", "1/0", ""])
def test_a_rotation_that_is_not_a_share_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(ValueError, match=r"write K/N with 0 <= K < N"):
        parse_rotation(text)


def test_a_rotation_names_its_share() -> None:
    assert parse_rotation("2/6") == (2, 6)
