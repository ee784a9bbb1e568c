"""The backend keeps a battle result's fingerprint (issue 30): what tau2 and which task definitions the battle was
scored on reaches ``GET /battles/{id}`` as the green agent wrote it in summary.json (here through an import of a run
directory, the same store path a live result takes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from battle_backend.__main__ import import_into_store
from tests.battle_backend.battles.test_battle_import import BATTLE_ID, document, settings, write
from tests.battle_backend.conftest import run_backend

FINGERPRINT: dict[str, Any] = {
    "tau2": {"distribution": "tau2", "version": "1.0.1", "evaluator": "e" * 64},
    "user_simulator": {"kind": "scripted", "model": None, "prompt_hash": None},
    "domains": {"retail": {"database": "d" * 64, "policy": "p" * 64, "tools": "t" * 64}},
    "tasks": {"retail/test/0": "0" * 64, "retail/test/1": "1" * 64},
}


async def test_the_battle_keeps_the_results_fingerprint(tmp_path: Path, db_path: Path) -> None:
    doc = document()
    doc["result"]["detail"]["fingerprint"] = FINGERPRINT
    [report] = await import_into_store(settings(db_path), [write(tmp_path, doc)])
    assert report.state == "finished"
    async with run_backend(db_path) as backend:
        battle = (await backend.client.get(f"/battles/{BATTLE_ID}")).json()
        assert battle["result"]["detail"]["fingerprint"] == FINGERPRINT
