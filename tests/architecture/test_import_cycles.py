"""No two modules of ours import each other, directly or round a longer circle (static, via ast).

Every import counts, as in test_import_directions: those inside functions and under ``TYPE_CHECKING`` too. A lazy
import that closes a circle still ties the two modules into one (neither can be read, tested or moved alone), and a
circle that only works because one side imports late breaks as soon as someone tidies the import to the top.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.architecture.test_import_directions import ROOT, imports_of, module_name

PACKAGES = ("green_agent", "battle_backend", "launcher", "white_agent")

KNOWN_CYCLES: tuple[frozenset[str], ...] = (
    # The sandbox process's main imports its child side lazily, and the child builds environments that use the
    # sandbox's types: breaking it means moving the process main out of sandbox.py (engine/tau, not done yet).
    frozenset(
        {
            "green_agent.engine.tau.environment",
            "green_agent.engine.tau.sandbox",
            "green_agent.engine.tau.sandbox_child",
        }
    ),
    # execute_backend_run hands --resume to backend_resume, which is built on backend_run's helpers.
    frozenset({"launcher.cli.backend_resume", "launcher.cli.backend_run"}),
)
"""Circles that exist and are to go (this list only shrinks: an entry that is no longer a circle fails the test)."""


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (a package counts as its ``__init__``)."""
    paths = [path for package in packages for path in sorted((root / package).rglob("*.py"))]
    modules = {module_name(path, root) for path in paths}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for path in paths:
        for imp in imports_of(path, root):
            if imp.target in modules and imp.target != imp.module:
                graph[imp.module].add(imp.target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_no_new_import_cycles() -> None:
    new = [sorted(cycle) for cycle in cycles(import_graph(ROOT, PACKAGES)) if cycle not in KNOWN_CYCLES]
    assert new == [], "modules that import each other (directly or round a circle): " + repr(new)


def test_every_known_cycle_still_exists() -> None:
    """A circle broken since must leave KNOWN_CYCLES, so the list only shrinks."""
    found = cycles(import_graph(ROOT, PACKAGES))
    assert [sorted(cycle) for cycle in KNOWN_CYCLES if cycle not in found] == []


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"a.py": "from pkg import b\n", "b.py": "def f():\n    from pkg.a import x\n"}, [{"pkg.a", "pkg.b"}]),
        (
            {
                "a.py": "from pkg.b import x\n",
                "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import y\n",
                "c.py": "import pkg.a\n",
            },
            [{"pkg.a", "pkg.b", "pkg.c"}],
        ),
        ({"a.py": "from pkg.b import x\n", "b.py": "import json\n"}, []),
        ({"a.py": "from pkg import a\n", "b.py": ""}, []),
    ],
)
def test_the_finder_sees_lazy_type_only_and_relative_circles(
    tmp_path: Path, files: dict[str, str], expected: list[set[str]]
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").touch()
    for name, source in files.items():
        (tmp_path / "pkg" / name).write_text(source, encoding="utf-8")
    assert [set(cycle) for cycle in cycles(import_graph(tmp_path, ("pkg",)))] == expected
