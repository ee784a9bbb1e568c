"""The launcher uses the green agent only through its deliberate public surface, never the service's internals; the
wire package (what crosses a process) imports nothing of the service either.

The surface (docs/architecture.md, "Dependencies"):

- ``green_agent.engine``: a battle as a library (config, results, typed events, the run directory, task selection
  and the tau2 adapter for ``arena regrade`` / ``arena export``, the white-agent client for ``arena check``);
- ``green_agent.statistics``: pure numbers (``arena compare``, ``arena plan``);
- ``green_agent.evaluations``: the dataset evaluations (``arena eval``);
- ``green_agent.run_files``: reading run directories as hostile input;
- ``green_agent.wire``: what crosses a process (AgentBeats messages, backend posts, the shared env/file names).

The launcher talks to the service only over HTTP (A2A, the backend API) and through ``arena-green``'s command line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.architecture.test_import_directions import ROOT, imports_of

LAUNCHER_MAY_IMPORT = (
    "green_agent.engine",
    "green_agent.statistics",
    "green_agent.evaluations",
    "green_agent.run_files",
    "green_agent.wire",
)
"""What of ``green_agent`` the launcher may import (by dotted prefix); ``green_agent`` itself only as a package."""
WIRE_MAY_NOT_IMPORT = ("green_agent.service", "green_agent.evaluations", "launcher", "battle_backend", "white_agent")


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def surface_violations(root: Path) -> list[str]:
    """Every launcher import of ``green_agent`` outside the surface, and every wire import of the service."""
    found = []
    for path in sorted((root / "launcher").rglob("*.py")):
        for imp in imports_of(path, root):
            public = imp.target == "green_agent" or any(_under(imp.target, ok) for ok in LAUNCHER_MAY_IMPORT)
            if _under(imp.target, "green_agent") and not public:
                found.append(f"{path.relative_to(root)}:{imp.line}: {imp.module} imports {imp.target}")
    for path in sorted((root / "green_agent" / "wire").rglob("*.py")):
        for imp in imports_of(path, root):
            if any(_under(imp.target, banned) for banned in WIRE_MAY_NOT_IMPORT):
                found.append(f"{path.relative_to(root)}:{imp.line}: {imp.module} imports {imp.target}")
    return sorted(set(found))


def test_the_launcher_imports_only_the_green_agents_public_surface() -> None:
    problems = surface_violations(ROOT)
    assert not problems, "outside the green agent's public surface:\n" + "\n".join(problems)


def test_every_surface_entry_exists() -> None:
    for name in LAUNCHER_MAY_IMPORT:
        path = ROOT / name.replace(".", "/")
        assert path.is_dir() or path.with_suffix(".py").is_file(), name


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("launcher/x.py", "from green_agent.service.outbox import OUTBOX_FILE\n"),
        ("launcher/cli/x.py", "def f():\n    from green_agent.service import running_battles\n"),
        ("launcher/x.py", "from green_agent import service\n"),
        ("launcher/x.py", "import green_agent.text_safety\n"),
        ("green_agent/wire/x.py", "from ..service import outbox\n"),
    ],
)
def test_the_check_catches_an_import_past_the_surface(tmp_path: Path, module: str, source: str) -> None:
    target = tmp_path / module
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source, encoding="utf-8")
    (tmp_path / "green_agent" / "wire").mkdir(parents=True, exist_ok=True)
    assert surface_violations(tmp_path), source


def test_the_surface_itself_passes_the_check(tmp_path: Path) -> None:
    (tmp_path / "launcher").mkdir()
    (tmp_path / "green_agent" / "wire").mkdir(parents=True)
    (tmp_path / "launcher" / "x.py").write_text(
        "from green_agent.engine.config import BattleConfig\nfrom green_agent.wire import process\n"
        "import green_agent\n",
        encoding="utf-8",
    )
    assert surface_violations(tmp_path) == []
