"""The import directions of the house, enforced (docs/architecture.md, "Dependencies").

Every ``import`` and ``from ... import`` of every module counts, also those inside functions and under
``TYPE_CHECKING``: a lazy import is still a dependency, and a type-only one still ties two parts together.

- battle_backend knows nothing of the agents nor of the launcher (it is a server that speaks HTTP to them);
- inside battle_backend, one arrow per layer (battle_backend/README.md): ``http`` may import everything;
  ``views`` nothing of ``http``; ``battles`` nothing of ``http`` or ``views``; the ``live`` hub nothing of those
  nor of ``battles`` (they publish to it); ``store`` nothing of any of them; the two stores not each other; and
  no layer imports the wiring at the root (``app``, ``context``, ``__main__``, ``testing``);
- white_agent is a standalone example agent: nothing of the other packages;
- green_agent imports nothing of launcher, battle_backend or white_agent;
- the battle engine imports nothing of the service around it, nor of the dataset evaluations;
- the dataset evaluations import nothing of the service;
- the statistics are pure: the standard library's arithmetic, numpy, scipy and pydantic, nothing that does I/O.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BACKEND_ROOT = ("battle_backend.app", "battle_backend.context", "battle_backend.__main__", "battle_backend.testing")
"""The backend's wiring at the package root: only the root and ``http`` import it."""

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "battle_backend": ("green_agent", "white_agent", "launcher"),
    "battle_backend.views": ("battle_backend.http", *BACKEND_ROOT),
    "battle_backend.battles": ("battle_backend.http", "battle_backend.views", *BACKEND_ROOT),
    "battle_backend.live": ("battle_backend.http", "battle_backend.views", "battle_backend.battles", *BACKEND_ROOT),
    "battle_backend.store": (
        "battle_backend.http",
        "battle_backend.views",
        "battle_backend.battles",
        "battle_backend.live",
        *BACKEND_ROOT,
    ),
    "battle_backend.store.sqlite": ("battle_backend.store.postgres",),
    "battle_backend.store.postgres": ("battle_backend.store.sqlite",),
    "white_agent": ("green_agent", "launcher", "battle_backend"),
    "green_agent": ("launcher", "battle_backend", "white_agent"),
    "green_agent.engine": ("green_agent.service", "green_agent.evaluations"),
    "green_agent.evaluations": ("green_agent.service",),
    "launcher": ("battle_backend",),
}
"""Package -> prefixes its modules must not import."""

STATISTICS = "green_agent.statistics"
STATISTICS_ALLOWED = (
    "__future__",
    "collections.abc",
    "dataclasses",
    "enum",
    "math",
    "numbers",
    "operator",
    "typing",
    "numpy",
    "scipy.stats",
    "scipy.special",
    "pydantic",
    STATISTICS,
)
"""Everything the statistics may import (an allow-list: a new dependency is a decision, not an accident)."""


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the imported module, dotted (absolute)
    line: int


def _matches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path) -> Iterator[Import]:
    """Every import in ``path`` as an absolute dotted target (relative imports resolved)."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield Import(module, target, node.lineno)
            for alias in node.names:  # ``from green_agent import service`` imports green_agent.service
                yield Import(module, f"{target}.{alias.name}", node.lineno)


def violations(root: Path, packages: tuple[str, ...]) -> list[str]:
    """Every import that breaks :data:`FORBIDDEN` or the statistics allow-list, as ``file:line: a -> b``."""
    found: list[str] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for imp in imports_of(path, root):
                where = f"{path.relative_to(root)}:{imp.line}: {imp.module} imports {imp.target}"
                for owner, banned in FORBIDDEN.items():
                    if _matches(imp.module, owner) and any(_matches(imp.target, b) for b in banned):
                        found.append(f"{where} (forbidden for {owner})")
                if _matches(imp.module, STATISTICS) and not any(
                    _matches(imp.target, allowed) for allowed in STATISTICS_ALLOWED
                ):
                    # ``from pydantic import BaseModel`` also yields ``pydantic.BaseModel``: allowed by prefix.
                    found.append(f"{where} (the statistics may import only {', '.join(STATISTICS_ALLOWED)})")
    return sorted(set(found))


def test_the_tree_keeps_its_import_directions() -> None:
    problems = violations(ROOT, ("battle_backend", "white_agent", "green_agent", "launcher"))
    assert problems == [], "\n".join(problems)


def test_every_rule_names_an_existing_package() -> None:
    # A renamed package would silently turn its rule into a no-op.
    for name in [*FORBIDDEN, STATISTICS, *(b for banned in FORBIDDEN.values() for b in banned)]:
        path = ROOT / name.replace(".", "/")
        assert path.is_dir() or path.with_suffix(".py").is_file(), name


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("battle_backend/app.py", "from green_agent.engine import results\n", "forbidden for battle_backend"),
        ("white_agent/x.py", "def f():\n    import green_agent.engine.config\n", "forbidden for white_agent"),
        ("green_agent/engine/x.py", "from ..service import running_battles\n", "forbidden for green_agent.engine"),
        ("green_agent/engine/x.py", "from green_agent import evaluations\n", "forbidden for green_agent.engine"),
        ("battle_backend/store/x.py", "from battle_backend.http import body\n", "forbidden for battle_backend.store"),
        ("battle_backend/store/x.py", "from ..battles import service\n", "forbidden for battle_backend.store"),
        ("battle_backend/store/x.py", "from battle_backend.live import hub\n", "forbidden for battle_backend.store"),
        (
            "battle_backend/store/sqlite/x.py",
            "from ..postgres import store\n",
            "forbidden for battle_backend.store.sqlite",
        ),
        (
            "battle_backend/store/postgres/x.py",
            "import battle_backend.store.sqlite\n",
            "forbidden for battle_backend.store.postgres",
        ),
        (
            "battle_backend/live/x.py",
            "from battle_backend.battles import service\n",
            "forbidden for battle_backend.live",
        ),
        (
            "battle_backend/battles/x.py",
            "from battle_backend.views import rendering\n",
            "forbidden for battle_backend.battles",
        ),
        ("battle_backend/battles/x.py", "from battle_backend import context\n", "forbidden for battle_backend.battles"),
        (
            "battle_backend/views/x.py",
            "from battle_backend.http import routes_web\n",
            "forbidden for battle_backend.views",
        ),
        (
            "battle_backend/views/x.py",
            "from battle_backend.app import create_app\n",
            "forbidden for battle_backend.views",
        ),
        ("green_agent/statistics/x.py", "import httpx\n", "the statistics may import only"),
        ("green_agent/statistics/x.py", "from pathlib import Path\n", "the statistics may import only"),
    ],
)
def test_the_checker_catches_each_kind_of_violation(tmp_path: Path, module: str, source: str, expected: str) -> None:
    path = tmp_path / module
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in path.relative_to(tmp_path).parents:
        if str(parent) != ".":
            (tmp_path / parent / "__init__.py").touch()
    path.write_text(source, encoding="utf-8")
    problems = violations(tmp_path, (module.split("/")[0],))
    assert any(expected in p for p in problems), problems


def test_allowed_imports_pass_the_checker(tmp_path: Path) -> None:
    path = tmp_path / "green_agent" / "statistics" / "x.py"
    path.parent.mkdir(parents=True)
    (tmp_path / "green_agent" / "__init__.py").touch()
    (path.parent / "__init__.py").touch()
    path.write_text("import math\nfrom scipy.stats import norm\nfrom .passk import pass_hat_k\n", encoding="utf-8")
    assert violations(tmp_path, ("green_agent",)) == []
