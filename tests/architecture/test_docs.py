"""The contributor docs stay true: every module and folder docs/architecture.md's tree names exists in the package
it is listed under, its line limit holds (except the modules listed here, a list that only shrinks), the README links
the architecture and CONTRIBUTING.md, and no docstring cites design notes that are not in the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("launcher", "green_agent", "white_agent", "battle_backend")

OVER_THE_LINE_LIMIT = frozenset(
    {
        "battle_backend/store/postgres/store.py",
        "battle_backend/store/sqlite/store.py",
        "green_agent/service/mcp/control.py",
        "launcher/cli/compare_command.py",
        "launcher/cli/run_command.py",
        "launcher/cli/run_verdict.py",
    }
)
"""Modules still over the limit docs/architecture.md states. Split one, then delete its line; never add one."""

_NAME = re.compile(r"(?<![\w./<-])([a-z_][a-z0-9_]*(?:\.py|/))(?![\w<])")
"""A module (``x.py``) or folder (``x/``) named in the tree; not a path inside one (``a/b``) nor ``runs/<id>``."""
_LIMIT = re.compile(r"under (\d+) lines")
_CITATION = re.compile(r"issue \d+ notes|notes of issue \d+|issue \d+ contract|\bthe issue notes\b|\(issue notes\)")


def _architecture() -> str:
    return (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _tree_names() -> list[tuple[str, str]]:
    """(package, name) for every ``x.py`` and ``x/`` of the first fenced block, under the package whose section (a
    line starting with ``package/`` in column 0) it is in."""
    block = _architecture().split("```", 2)[1]
    names: list[tuple[str, str]] = []
    package = ""
    for line in block.splitlines():
        head = line.split(" ", 1)[0]
        if head.rstrip("/") in PACKAGES and head.endswith("/"):
            package = head.rstrip("/")
            line = line[len(head) :]
        if package:
            names += [(package, name) for name in _NAME.findall(line)]
    return names


def test_every_module_and_folder_the_architecture_names_exists() -> None:
    names = _tree_names()
    assert len(names) > 30, f"the tree in docs/architecture.md was not found or not parsed: {names}"
    missing = []
    for package, name in names:
        root = ROOT / package
        if name.endswith("/"):
            found = any(p.is_dir() for p in root.rglob(name.rstrip("/")))
        else:
            found = any(p.is_file() for p in root.rglob(name))
        if not found:
            missing.append(f"{package}: {name}")
    assert not missing, "docs/architecture.md names modules that do not exist:\n" + "\n".join(missing)


def test_the_line_limit_holds_except_for_the_listed_modules() -> None:
    stated = _LIMIT.findall(_architecture())
    assert stated, 'docs/architecture.md states the modules\' line limit ("under N lines")'
    limit = int(stated[0])
    over = {
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if len(path.read_text(encoding="utf-8").splitlines()) > limit
    }
    assert over <= OVER_THE_LINE_LIMIT, f"over {limit} lines: {sorted(over - OVER_THE_LINE_LIMIT)} (split them)"


def test_the_readme_links_the_architecture_and_contributing() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in ("docs/architecture.md", "CONTRIBUTING.md"):
        assert f"]({target})" in readme, f"README.md links {target}"
        assert (ROOT / target).is_file()


def test_no_citation_of_notes_outside_the_repository() -> None:
    found = []
    for path in sorted(ROOT.glob("*.toml")) + sorted(ROOT.glob("*.md")):
        found += [f"{path.name}: {m}" for m in _CITATION.findall(path.read_text(encoding="utf-8"))]
    for folder in (*PACKAGES, "tests", "benchmarks", "scripts", "docs"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in {".py", ".md", ".toml", ".sh"} and path != Path(__file__).resolve():
                text = path.read_text(encoding="utf-8")
                found += [f"{path.relative_to(ROOT)}: {m}" for m in _CITATION.findall(text)]
    assert not found, "cite docs/design/ instead:\n" + "\n".join(found)
