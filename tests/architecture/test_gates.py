"""The gates stay gates: mypy strict over the whole tree with a tests allow-list that only shrinks, pytest strict
about markers and settings, CI running scripts/check before pytest, and no timed assertion outside the adversarial
suite (speed goals live in benchmarks/; CONTRIBUTING.md says why)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

ALLOW_LIST_CEILING = 18
"""Test modules still allowed to fail mypy --strict (pyproject.toml). Lower it whenever you shrink the list."""

TIMED = re.compile(r"perf_counter|monotonic|elapsed|\bp99\b|max\(\w*gaps\)")
"""What a timed assertion reads: a clock, an elapsed time, a latency percentile, the longest gap between ticks."""


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _allow_list() -> list[str]:
    overrides: list[dict[str, Any]] = _pyproject()["tool"]["mypy"].get("overrides", [])
    ignored = [o for o in overrides if o.get("ignore_errors")]
    assert len(ignored) <= 1, "one allow-list (one override with ignore_errors), not several"
    return list(ignored[0]["module"]) if ignored else []


def test_mypy_is_strict_over_the_whole_tree() -> None:
    mypy = _pyproject()["tool"]["mypy"]
    assert mypy["strict"] is True
    assert set(mypy["files"]) >= {"green_agent", "launcher", "battle_backend", "white_agent", "tests", "benchmarks"}


def test_the_tests_allow_list_only_shrinks_and_names_real_test_modules() -> None:
    modules = _allow_list()
    assert len(modules) <= ALLOW_LIST_CEILING, (
        f"the mypy allow-list grew to {len(modules)} modules (ceiling {ALLOW_LIST_CEILING}): type the new test instead"
    )
    assert len(set(modules)) == len(modules), "a module is listed twice"
    for module in modules:
        assert module.startswith("tests."), f"{module}: only test modules may be allow-listed"
        path = ROOT / Path(*module.split("."))
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), (
            f"{module} is allow-listed but no such file exists: moved or fixed? update pyproject.toml"
        )


def test_pytest_is_strict_about_markers_and_settings() -> None:
    options = _pyproject()["tool"]["pytest"]["ini_options"]
    addopts = options["addopts"].split() if isinstance(options["addopts"], str) else options["addopts"]
    assert {"--strict-markers", "--strict-config"} <= set(addopts)
    assert options["filterwarnings"][0] == "error"


def test_ci_runs_scripts_check_before_pytest() -> None:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    commands = [line for line in lines if line and not line.startswith("#")]
    check = next(i for i, line in enumerate(commands) if line == "bash scripts/check")
    first_pytest = next(i for i, line in enumerate(commands) if "-m pytest" in line)
    assert check < first_pytest
    assert not [line for line in commands if re.search(r"\b(ruff|mypy)\b", line)], "the gates run in scripts/check"
    script = (ROOT / "scripts" / "check").read_text(encoding="utf-8")
    for gate in ('ruff" check', 'ruff" format --check', 'mypy"'):
        assert gate in script, gate


def _timed_assertions(source: str, shown_as: str) -> list[str]:
    """``assert`` statements of ``source`` that read a clock or a latency, except a wait's guard (``< deadline``: a
    bound on a hang, like pytest-timeout's, not a speed goal)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert):
            text = ast.get_source_segment(source, node.test) or ""
            if TIMED.search(text) and "deadline" not in text:
                found.append(f"{shown_as}:{node.lineno}: assert {text}")
    return found


def test_no_timed_assertion_outside_the_adversarial_suite() -> None:
    found = [
        line
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if "adversarial" not in path.relative_to(ROOT).parts
        for line in _timed_assertions(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert not found, "speed goals belong in benchmarks/ (CONTRIBUTING.md):\n" + "\n".join(found)


def test_the_finder_finds_timed_assertions_and_passes_a_wait_guard() -> None:
    source = (
        "import time\n"
        "started = time.perf_counter()\n"
        "assert time.perf_counter() - started < 0.1\n"
        "assert health.p99 < 100, 'slow'\n"
        "deadline = time.monotonic() + 60\n"
        "assert time.monotonic() < deadline, 'never started'\n"
        "assert latency.p50_s <= latency.p95_s\n"
        "assert len(ticks) > 20 and max(gaps) < 2.0\n"
        "assert len(gaps) == 1\n"
    )
    found = _timed_assertions(source, "sample.py")
    assert [line.split(":")[1] for line in found] == ["3", "4", "8"], found
