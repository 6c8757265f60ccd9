"""The sample trainer's launch line is written in one place, tests/support/training.py (trainer_command,
trainer_argv): a suite that types its own `torchrun ... train_ddp.py` drifts from the others when the
launch changes (a rendezvous option, the thread count, the timeout that keeps a hang from holding CI).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import REPO_ROOT

LAUNCH_LINE = re.compile(r"\b(torchrun|python3?)\b[^|;&\n]*?train_ddp\.py")
THE_ONE_PLACE = REPO_ROOT / "tests" / "support" / "training.py"
# Process tables written out by hand, whose command lines are data, not launches.
NOT_LAUNCHING = REPO_ROOT / "tests" / "unit"


def text_of(node: ast.AST) -> str | None:
    """The text a string, an f-string (each placeholder as {}) or a list of them spells, words joined."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    if isinstance(node, (ast.List, ast.Tuple)):
        words = [text_of(element) for element in node.elts]
        return " ".join(word for word in words if word is not None)
    return None


def docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def launch_lines(path: Path, root: Path = REPO_ROOT) -> list[str]:
    """PATH's launch lines, one per line of source, as "FILE:LINE: TEXT" with FILE relative to ROOT."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = docstrings(tree)
    found: dict[int, str] = {}
    for node in ast.walk(tree):
        text = None if id(node) in skipped else text_of(node)
        if text is not None and LAUNCH_LINE.search(text):
            found.setdefault(node.lineno, f"{path.relative_to(root)}:{node.lineno}: {text[:100]}")
    return [found[line] for line in sorted(found)]


def test_the_trainer_is_launched_through_trainer_command_alone():
    sources = [path for path in sorted((REPO_ROOT / "tests").rglob("*.py"))
               if path != THE_ONE_PLACE and NOT_LAUNCHING not in path.parents]
    found = [line for path in sources for line in launch_lines(path)]
    assert not found, ("launch lines of the trainer outside tests/support/training.py; build them with "
                       "trainer_command() or trainer_argv() instead:\n" + "\n".join(found))


def test_the_check_finds_each_form_of_a_launch_line(tmp_path):
    """The forms the suites used: a string, an f-string split over lines, and a list of words."""
    source = tmp_path / "sample.py"
    source.write_text('"""Run `python train_ddp.py ARGS`: a docstring says so, and launches nothing."""\n'
                      'A = "OMP_NUM_THREADS=1 torchrun --standalone /opt/scripts/train_ddp.py"\n'
                      'B = ("cd /w && torchrun --nproc-per-node=1 "\n     f"{DIR}/train_ddp.py {FLAGS}")\n'
                      'C = ["python", "/opt/scripts/train_ddp.py", "--max-steps", "2"]\n'
                      'D = "pgrep -f train_ddp.py"\n')
    assert [line.split(":")[1] for line in launch_lines(source, tmp_path)] == ["2", "3", "5"]
