"""The maps a newcomer reads first (README.md, docs/, .env.example, compose.yaml) against the tree they
describe. Each map is derived from the tree here, not listed, so a new suite, variable or file fails
this test until it is documented; each failure says what to add where.
"""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest
import yaml

from tests.support import REPO_ROOT

# helpers, the tier `make test-unit` runs before the build, and the arm64 smoke tier `make test-arm64` runs
# on the arm64 image (docs/testing.md)
NOT_SUITES = {"support", "unit", "arm64"}
DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
# Files whose comments send readers to docs and files; their named paths must exist too.
POINTERS = [REPO_ROOT / name for name in ("Makefile", "Dockerfile", ".env.example", "BENCHMARKS.md")]
STARTUP_FILES = [REPO_ROOT / "entrypoint.sh",
                 *sorted((REPO_ROOT / "docker" / "rootfs" / "usr" / "local" / "lib" / "container").rglob("*.sh")),
                 *sorted((REPO_ROOT / "docker" / "rootfs" / "usr" / "local" / "bin").iterdir())]
DEV_COMPOSE_FILES = [REPO_ROOT / "compose.yaml", REPO_ROOT / "compose.cpu.yaml"]
NOT_FORWARDED_HEADING = "# Not forwarded, on purpose"
# Set by every runtime for every process, never a setting of this image: start-up reads them only to
# cope with what the runtime gave (Apptainer's and Enroot's HOME, for example).
RUNTIME_VARIABLES = {"HOME", "PATH", "USER", "LOGNAME", "SHELL", "TERM"}


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    """The lines under a markdown heading, up to the next heading of the same level or above."""
    level = heading.split()[0]
    match = re.search(rf"^{re.escape(heading)}\n(.*?)(?=^#{{1,{len(level)}}} |\Z)", text, re.M | re.S)
    assert match, f"no section {heading!r}"
    return match.group(1)


# ---- suites ------------------------------------------------------------------------------------------

def suites() -> list[str]:
    """The folders under tests/ that hold test files: what `make test` runs, less support/ and unit/."""
    return sorted(folder.name for folder in (REPO_ROOT / "tests").iterdir()
                  if folder.is_dir() and folder.name not in NOT_SUITES and any(folder.glob("test_*.py")))


def test_make_test_runs_every_suite() -> None:
    listed = re.search(r"^IMAGE_SUITES :=(.*)$", read(REPO_ROOT / "Makefile"), re.M).group(1).split()
    missing = [f"tests/{name}" for name in suites() if f"tests/{name}" not in listed]
    assert not missing, f"make test skips {missing}: add them to IMAGE_SUITES in the Makefile"


def readme_tree_names() -> set[str]:
    tree = section(read(REPO_ROOT / "README.md"), "## What is in the repository")
    return set(re.findall(r"^  ([\w.-]+)/ ", tree, re.M))


@pytest.mark.parametrize("suite", suites())
def test_every_suite_is_named_on_every_map(suite: str) -> None:
    missing = []
    if suite not in readme_tree_names():
        missing.append(f"README.md's tree ('What is in the repository'): a line `  {suite}/  what it tests` "
                       "under tests/")
    if f"`tests/{suite}`" not in section(read(REPO_ROOT / "docs" / "testing.md"), "## The tiers"):
        missing.append(f"docs/testing.md: `tests/{suite}` in the `make test` row of 'The tiers'")
    if f"`tests/{suite}/`" not in section(read(REPO_ROOT / "docs" / "contributing.md"), "## Where a test goes"):
        missing.append(f"docs/contributing.md: a row for `tests/{suite}/` in 'Where a test goes'")
    assert not missing, f"tests/{suite}/ is a suite of make test; name it in " + "; and in ".join(missing)


SUITE_FOLDERS = {"helpers", "data", "__pycache__"}  # a suite's own helpers; the programs and files it runs
SUITE_FILES = {"conftest.py", "__init__.py"}


@pytest.mark.parametrize("suite", suites())
def test_a_suite_folder_holds_tests_its_helpers_and_its_data(suite: str) -> None:
    """A suite's own helpers live in its helpers/, what its tests run in its data/, benchmarks in tools/,
    so each has one place to be found."""
    folder = REPO_ROOT / "tests" / suite
    others = sorted(path.name for path in folder.iterdir()
                    if (path.is_dir() and path.name not in SUITE_FOLDERS)
                    or (path.is_file() and not path.name.startswith("test_") and path.name not in SUITE_FILES))
    assert not others, (f"tests/{suite}/ holds {others}: a helper of this suite alone goes to tests/{suite}/helpers/, "
                        f"a program or file its tests run to tests/{suite}/data/, a benchmark to tools/ "
                        "(docs/contributing.md)")


def importers(module: str) -> set[str]:
    """The top folders (a suite, support, tools, or conftest.py) whose Python files import MODULE."""
    pattern = re.compile(rf"^\s*(from {re.escape(module)} import|import {re.escape(module)}\b)", re.M)
    found = set()
    for path in [*(REPO_ROOT / "tests").rglob("*.py"), *(REPO_ROOT / "tools").rglob("*.py")]:
        if path.with_suffix("").relative_to(REPO_ROOT).as_posix().replace("/", ".") != module and \
                pattern.search(read(path)):
            parts = path.relative_to(REPO_ROOT).parts
            found.add(parts[0] if parts[0] == "tools" else parts[1])
    return found


@pytest.mark.parametrize("module", sorted(path.stem for path in (REPO_ROOT / "tests" / "support").glob("*.py")
                                          if path.stem != "__init__"))
def test_support_holds_only_what_is_shared(module: str) -> None:
    """tests/support/ is for what several suites, tests/conftest.py or tools/ use; a helper of one suite
    lives beside it, where a reader of that suite finds it."""
    users = importers(f"tests.support.{module}")
    suites_using = users - {"support"}
    shared = len(suites_using) >= 2 or "tools" in users or "conftest.py" in users or \
        ("support" in users and suites_using)
    assert shared, (f"tests/support/{module}.py is used by {sorted(users) or 'nothing'} alone: move it to "
                    f"tests/{next(iter(suites_using), 'SUITE')}/helpers/{module}.py")


# ---- variables ---------------------------------------------------------------------------------------

def startup_variables() -> set[str]:
    """What start-up reads from the environment: every ${NAME:-...} (or -, +, ?) and every read_switch NAME."""
    text = "\n".join(read(path) for path in STARTUP_FILES)
    return (set(re.findall(r"\$\{([A-Z][A-Z0-9_]*):?[-+?]", text))
            | set(re.findall(r"\bread_switch ([A-Z][A-Z0-9_]*)", text))) - RUNTIME_VARIABLES


class ComposeLoader(yaml.SafeLoader):
    """YAML with compose's merge tags (`!reset`, `!override`), read as the plain values they tag."""


def plain_value(loader: yaml.SafeLoader, _tag: str, node: yaml.Node) -> object:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_scalar(node)


ComposeLoader.add_multi_constructor("!", plain_value)


def dev_service(path: Path) -> dict:
    return yaml.load(read(path), Loader=ComposeLoader)["services"]["dev"]


def compose_variables() -> set[str]:
    """What the dev compose files read from .env: interpolations, bare environment keys and build args
    (less compose's own COMPOSE_* settings)."""
    names: set[str] = set()
    for path in DEV_COMPOSE_FILES:
        names |= set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", read(path)))
        service = dev_service(path)
        names |= {key for key, value in (service.get("environment") or {}).items() if value is None}
        args = (service.get("build") or {}).get("args") or []
        names |= set(args if isinstance(args, list) else ())
    return {name for name in names if not name.startswith("COMPOSE_")}


def readme_table_variables() -> set[str]:
    rows = [line for line in section(read(REPO_ROOT / "README.md"), "## Variables").splitlines()
            if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", row.split("|")[1])}


def not_forwarded() -> dict[str, str]:
    """compose.yaml's list of start-up variables it leaves out on purpose, each with its reason."""
    lines = read(REPO_ROOT / "compose.yaml").splitlines()
    start = next((index for index, line in enumerate(lines) if line.strip().startswith(NOT_FORWARDED_HEADING)),
                 len(lines))
    reasons = {}
    for line in lines[start + 1:]:
        match = re.match(r"\s*#\s+([A-Z][A-Z0-9_]*): (\S.*)$", line)
        if not match:
            break
        reasons[match.group(1)] = match.group(2)
    return reasons


@pytest.mark.parametrize("name", sorted(startup_variables() | compose_variables()))
def test_every_variable_is_documented(name: str) -> None:
    missing = []
    if name not in readme_table_variables():
        missing.append(f"a row `| `{name}` | default | what it does |` in README.md's 'Variables' table")
    if not re.search(rf"\b{name}\b", read(REPO_ROOT / ".env.example")):
        missing.append(f"`{name}=default` (or `# {name}=default`) with a comment line in .env.example")
    assert not missing, f"{name} is read by start-up or compose; add " + ", and ".join(missing)


@pytest.mark.parametrize("name", sorted(startup_variables()))
def test_every_startup_variable_is_forwarded_by_compose_or_listed_as_not(name: str) -> None:
    forwarded = dev_service(REPO_ROOT / "compose.yaml").get("environment") or {}
    assert name in forwarded or name in not_forwarded(), (
        f"start-up reads {name} but compose.yaml neither forwards it nor says why not: add `{name}: ${{{name}:-}}` "
        f"under services.dev.environment, or `#   {name}: the reason` under '{NOT_FORWARDED_HEADING}' there")


def env_example_values() -> dict[str, str]:
    """NAME -> value of every `NAME=value` or `# NAME=value` line of .env.example."""
    return dict(re.findall(r"^(?:# )?([A-Z][A-Z0-9_]*)=(\S*)$", read(REPO_ROOT / ".env.example"), re.M))


def defaults_in_effect() -> dict[str, str]:
    """compose.yaml's ${NAME:-default}s, and the Dockerfile's ARG defaults of the build args it passes."""
    defaults = dict(re.findall(r"\$\{([A-Z][A-Z0-9_]*):-([^}]*)\}", read(REPO_ROOT / "compose.yaml")))
    args = dev_service(REPO_ROOT / "compose.yaml")["build"]["args"]
    arg_defaults = dict(re.findall(r"^ARG ([A-Z][A-Z0-9_]*)=(\S+)$", read(REPO_ROOT / "Dockerfile"), re.M))
    defaults.update({name: arg_defaults[name] for name in args if name in arg_defaults})
    return defaults


@pytest.mark.parametrize("name", sorted(env_example_values().keys() & defaults_in_effect().keys()))
def test_env_example_shows_the_default_in_effect(name: str) -> None:
    shown, default = env_example_values()[name], defaults_in_effect()[name]
    assert shown == default, (f".env.example shows {name}={shown}, but the default in effect is {default} "
                              "(compose.yaml's ${...:-default}, or the Dockerfile's ARG): make them one value")


# ---- links and paths ---------------------------------------------------------------------------------

def top_level_folders() -> list[str]:
    return sorted(path.name for path in REPO_ROOT.iterdir()
                  if path.is_dir() and path.name not in {".git", ".venv-test", ".build", ".pytest_cache"}
                  and not path.name.startswith(".venv"))


def named_paths(text: str) -> set[str]:
    """Repository paths a doc names: tokens that start with a top-level folder (`scripts/doctor.py`,
    deploy/slurm/), less those that are patterns or placeholders."""
    folders = "|".join(re.escape(name) for name in top_level_folders())
    found = re.findall(rf"(?<![\w/.$-])((?:{folders})/[\w./-]*+(?:::\w+)?)(?![<*{{])", text)
    return {path.rstrip(".") for path in found if "..." not in path}


def is_in_tree(named: str) -> bool:
    """Whether a named path exists, and for tests/x.py::test_y also the test function it names."""
    path, _, function = named.partition("::")
    if not (REPO_ROOT / path).exists():
        return False
    return not function or re.search(rf"^def {function}\(", read(REPO_ROOT / path), re.M) is not None


def links(text: str) -> set[str]:
    """Targets of markdown links that point into the repository (no URL), without their #anchor."""
    return {target.split("#")[0] for target in re.findall(r"\]\(([^)\s]+)\)", text)
            if not re.match(r"[a-z]+:", target) and not target.startswith("#")}


@pytest.mark.parametrize("doc", DOCS + POINTERS, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_every_link_and_path_a_doc_names_exists(doc: Path) -> None:
    text = read(doc)
    broken = sorted(f"link ({target})" for target in links(text) if not (doc.parent / target).exists())
    broken += sorted(f"path {path}" for path in named_paths(text) if not is_in_tree(path))
    assert not broken, (f"{doc.relative_to(REPO_ROOT)} names what the tree lacks: {', '.join(broken)}; "
                        "fix the name in the doc, or add the file")


# The folders of the project's own Python; not what a user keeps in the checkout (workspace/, which compose
# mounts, test-artifacts/ and virtual environments), which need not even parse.
PYTHON_FOLDERS = ("deploy", "docker", "examples", "scripts", "tests", "tools")


def test_every_path_a_python_file_opens_with_exists() -> None:
    """A Python file's docstring is the map of what it tests or does; the files it names must exist."""
    broken = []
    for path in sorted(path for folder in PYTHON_FOLDERS for path in (REPO_ROOT / folder).rglob("*.py")):
        opening = ast.get_docstring(ast.parse(read(path))) or ""
        broken += [f"{path.relative_to(REPO_ROOT)}: {named}" for named in sorted(named_paths(opening))
                   if not is_in_tree(named)]
    assert not broken, (f"these docstrings name what the tree lacks: {'; '.join(broken)}; name the file that "
                        "holds it now")


def repository_text_files() -> list[Path]:
    """The repository's own files: build outputs, caches and virtual environments left out."""
    skipped = {".git", ".build", ".pytest_cache", "__pycache__", "node_modules", ".wheelhouse"}
    files = []
    for folder, subfolders, names in os.walk(REPO_ROOT):
        subfolders[:] = [name for name in subfolders if name not in skipped and not name.startswith(".venv")]
        files += [Path(folder) / name for name in names]
    return [path for path in sorted(files) if path.stat().st_size < 200_000]


def headings(doc: str) -> set[str]:
    path = REPO_ROOT / ("README.md" if doc == "README" else doc)
    return {name.lower() for name in re.findall(r"^#+ (.+)$", read(path), re.M)} if path.is_file() else set()


def test_every_section_a_file_points_at_exists() -> None:
    """A pointer like `README, "Variables"` (or a docs/ file and a heading) names a real heading, in any case."""
    wrong = []
    for path in repository_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        wrong += [f'{path.relative_to(REPO_ROOT)}: {doc}, "{name}"'
                  for doc, name in re.findall(r'(README|docs/[\w-]+\.md)(?:\.md)?(?:,|\'s) "([^"]+)"', text)
                  if name.lower() not in headings(doc)]
    assert not wrong, (f"these point at sections that do not exist: {'; '.join(wrong)}; point them at the "
                       "heading, or the docs/ file that holds the text now")


def required_variables(compose_file: str) -> set[str]:
    """The variables COMPOSE_FILE cannot start without: `${NAME:?message}`."""
    return set(re.findall(r"\$\{([A-Z0-9_]+):\?", read(REPO_ROOT / compose_file)))


def bring_ups(text: str) -> list[tuple[str, str]]:
    """(compose file, the shell block) for each bash block of TEXT that runs `compose -f FILE ... up`."""
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [(match, block) for block in blocks
            for match in re.findall(r"compose .*?-f (\S+\.yaml)[^\n]* up\b", block)]


MARKDOWN = [path.relative_to(REPO_ROOT).as_posix() for path in repository_text_files() if path.suffix == ".md"]
DOCS_WITH_BRING_UPS = [doc for doc in MARKDOWN if bring_ups(read(REPO_ROOT / doc))]


def test_the_docs_that_start_compose_files_are_found() -> None:
    assert {"README.md", "deploy/jupyterhub/README.md"} <= set(DOCS_WITH_BRING_UPS), DOCS_WITH_BRING_UPS


@pytest.mark.parametrize("doc", DOCS_WITH_BRING_UPS)
def test_a_docs_compose_up_sets_every_variable_its_file_requires(doc: str) -> None:
    for compose_file, block in bring_ups(read(REPO_ROOT / doc)):
        path = compose_file if (REPO_ROOT / compose_file).exists() else str(Path(doc).parent / compose_file)
        missing = {name for name in required_variables(path) if not re.search(rf"\b{name}=", block)}
        assert not missing, f"{doc}: the block that starts {compose_file} never sets {sorted(missing)}"


def test_no_two_test_files_share_a_name() -> None:
    """A name says where a test is: `pytest -k`, a CI summary and a reader's search find one file."""
    by_name: dict[str, list[str]] = {}
    for path in sorted((REPO_ROOT / "tests").rglob("test_*.py")):
        by_name.setdefault(path.name, []).append(str(path.relative_to(REPO_ROOT)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"test files that share a name; rename one of each: {shared}"
