"""The README's first two commands keep their promises (issue 26): the first installs what running Arena needs,
visibly (no ``pip -q``, no test extras), and runs the offline demo; the second adds the test extras and runs the
README's test command, the one .ci/run runs; both say how long they take. Browser tests save screenshots outside the
checkout unless asked (``pytest`` leaves ``git status`` clean: the docs' pictures change only on purpose)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.deploy.test_readme_commands import readme_blocks
from tests.support.browser import SCREENSHOT_DIR_ENV, screenshot_path

ROOT = Path(__file__).resolve().parents[2]


def _first_two() -> tuple[str, str]:
    blocks = [block for block in readme_blocks((ROOT / "README.md").read_text(encoding="utf-8")) if block.lang]
    return blocks[0].body.strip(), blocks[1].body.strip()


def test_the_first_command_installs_without_test_extras_and_visibly() -> None:
    first, _ = _first_two()
    install = next(part.strip() for part in first.split("&&") if "pip install" in part)
    assert install == ".venv/bin/pip install -e .", install  # no -q (pip's progress shows), no [test]
    assert first.endswith(".venv/bin/arena run scenarios/offline_demo.toml")


def test_the_second_command_adds_the_test_extras_and_runs_what_ci_runs() -> None:
    _, second = _first_two()
    assert second == ".venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest -q"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install --quiet -e '.[test]'" in ci
    assert ".venv/bin/python -m pytest -q" in ci


def test_the_readme_says_how_long_both_commands_take() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    after = text[text.index(".venv/bin/python -m pytest -q") :]
    prose = after[: after.index("How Arena is built")]
    assert re.search(r"install\w*[^.]*\d+\s*s\b", prose, re.IGNORECASE), "the install's duration"
    assert re.search(r"demo battle \(about \d+ s\)", prose), "the demo's duration"
    assert re.search(r"test suite \(about \d+ to \d+ minutes", prose), "the test suite's duration"


def test_screenshots_go_to_the_test_folder_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SCREENSHOT_DIR_ENV, raising=False)
    path = screenshot_path("page.png", tmp_path)
    assert path.parent.is_dir() and path.is_relative_to(tmp_path)
    asked = tmp_path / "docs-pictures"
    monkeypatch.setenv(SCREENSHOT_DIR_ENV, str(asked))
    assert screenshot_path("page.png", tmp_path) == asked / "page.png"
    assert asked.is_dir()


def test_no_test_writes_into_docs_screenshots_directly() -> None:
    """Every browser test goes through screenshot_path: a literal docs/screenshots path in a test would rewrite the
    tracked pictures on every run."""
    literal = re.compile(r"""/\s*["']screenshots["']|["']docs/screenshots""")  # REPO / "docs" / "screenshots"
    allowed = {Path(__file__), ROOT / "tests" / "support" / "browser.py"}
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("*.py")
        if path not in allowed and literal.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
