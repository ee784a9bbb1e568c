"""``python -m battle_backend --import FILE.json``: a battle from a run directory's import file is loaded through the
store before serving, shown like a live one, never scheduled; a bad file is refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from battle_backend import BackendSettings
from battle_backend.__main__ import import_into_store, main
from battle_backend.battles.imports import INTERRUPTED_REASON, ImportFileError
from tests.battle_backend.attempt_samples import attempt_finished, battle_started, progress_event
from tests.battle_backend.conftest import run_backend
from tests.battle_backend.sample_result import battle_result

BATTLE_ID = "0f1e2d3c-run-directory"
TASKS = ["retail/test/0", "retail/test/1"]


def document(*, with_result: bool = True, calibration: bool = False) -> dict[str, Any]:
    """An import file as `arena view RUN_DIR` writes it."""
    events = [
        {**progress_event(battle_started(TASKS, 3, calibration=calibration)), "timestamp": "2026-11-23T01:37:00Z"},
        {**progress_event(attempt_finished(TASKS[0], 1, "failure", done=1, total=6)), "timestamp": ""},
        progress_event(attempt_finished(TASKS[0], 2, "success", done=2, total=6)),
    ]
    result = None
    if with_result:
        detail = battle_result(BATTLE_ID)
        detail["calibration"] = calibration
        result = {
            "is_result": True,
            "message": "pass^k evaluation finished: 6 attempts",
            "winner": "green_agent",
            "detail": detail,
            "markdown_content": "# Arena pass^k evaluation",
            "reported_by": "green_agent",
            "timestamp": "2026-11-23T01:40:00Z",
        }
    return {
        "schema": "arena.battle-import/1",
        "battle": {
            "battle_id": BATTLE_ID,
            "green_agent": {"alias": "arena green agent (run directory)", "agent_url": "http://127.0.0.1:0"},
            "opponents": [{"name": "white_agent", "alias": "white agent (flaky)", "agent_url": "http://127.0.0.1:1"}],
            "config": {"pass_k_config": {"k": 3}},
        },
        "events": events,
        "result": result,
    }


def write(tmp_path: Path, doc: Any, name: str = "import.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def settings(db_path: Path, **overrides: Any) -> BackendSettings:
    return BackendSettings(db_path=db_path, **overrides)


async def test_imported_battle_is_shown_like_a_live_one(tmp_path: Path, db_path: Path) -> None:
    path = write(tmp_path, document())
    [report] = await import_into_store(settings(db_path), [path])
    assert (report.battle_id, report.events, report.state) == (BATTLE_ID, 4, "finished")
    async with run_backend(db_path) as backend:
        battle = (await backend.client.get(f"/battles/{BATTLE_ID}")).json()
        assert battle["state"] == "finished" and battle["result"]["winner"] == "green_agent"
        posted = [e for e in battle["interact_history"] if e["reported_by"] == "green_agent"]
        types = [e["detail"]["type"] for e in posted if not e["is_result"]]
        assert types == ["battle_started", "attempt_finished", "attempt_finished"]
        assert posted[1]["timestamp"]  # a missing timestamp is filled in, as the API does
        assert backend.ctx.scheduler.running_count == 0
        agents = {a["register_info"]["alias"]: a for a in (await backend.client.get("/agents")).json()}
        white = agents["white agent (flaky)"]
        assert white["status"] == "unlocked" and white["elo"]["rating"] == 985
        viewer = await backend.client.get(f"/ui/battles/{BATTLE_ID}/attempts/{TASKS[0]}/1")
        assert viewer.status_code == 200 and 'id="db-diff"' in viewer.text and "get_order_details" in viewer.text
        page = (await backend.client.get(f"/ui/battles/{BATTLE_ID}")).text
        assert 'id="attempt-grid"' in page and "Why it failed" not in page
        index = (await backend.client.get("/")).text
        assert "arena green agent (run directory)" in index and "white_agent: white agent (flaky)" in index


async def test_importing_twice_skips_the_battle(tmp_path: Path, db_path: Path) -> None:
    path = write(tmp_path, document())
    await import_into_store(settings(db_path), [path])
    [again] = await import_into_store(settings(db_path), [path])
    assert again.state == "skipped"


async def test_an_interrupted_run_ends_in_error_and_keeps_its_attempts(tmp_path: Path, db_path: Path) -> None:
    [report] = await import_into_store(settings(db_path), [write(tmp_path, document(with_result=False))])
    assert report.state == "error"
    async with run_backend(db_path) as backend:
        battle = (await backend.client.get(f"/battles/{BATTLE_ID}")).json()
        assert battle["state"] == "error" and battle["error"] == INTERRUPTED_REASON
        page = (await backend.client.get(f"/ui/battles/{BATTLE_ID}")).text
        assert 'id="live-grid"' in page and 'id="progress-done">2 / 6<' in page
        viewer = await backend.client.get(f"/ui/battles/{BATTLE_ID}/attempts/{TASKS[0]}/2")
        assert viewer.status_code == 200


async def test_an_imported_calibration_battle_moves_no_rating(tmp_path: Path, db_path: Path) -> None:
    await import_into_store(settings(db_path), [write(tmp_path, document(calibration=True))])
    async with run_backend(db_path) as backend:
        agents = {a["register_info"]["alias"]: a for a in (await backend.client.get("/agents")).json()}
        elo = agents["white agent (flaky)"]["elo"]
        assert elo["rating"] == 1000 and elo["battle_history"][0]["elo_change"] == 0


def broken(change: str) -> dict[str, Any]:
    doc = document()
    if change == "no opponents":
        del doc["battle"]["opponents"]
    elif change == "timestamp":
        doc["events"][1]["timestamp"] = {"when": "now"}
    elif change == "schema":
        doc["schema"] = "arena.battle-import/2"
    elif change == "battle id":
        doc["battle"]["battle_id"] = "../etc"
    elif change == "arena result":  # declares Arena's schema without matching it
        doc["result"]["detail"]["schema"] = "arena.battle-result/1"
    elif change == "unknown field":
        doc["battle"]["colour"] = "green"
    return doc


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("no opponents", "battle.opponents: Field required"),
        ("timestamp", "events[1].timestamp"),
        ("schema", "schema: Input should be 'arena.battle-import/1'"),
        ("battle id", "battle.battle_id: String should match pattern"),
        ("arena result", "$.result.detail"),
        ("unknown field", "battle.colour: Extra inputs are not permitted"),
    ],
)
async def test_a_bad_file_is_refused_naming_the_field(tmp_path: Path, db_path: Path, change: str, named: str) -> None:
    path = write(tmp_path, broken(change))
    with pytest.raises(ImportFileError) as caught:
        await import_into_store(settings(db_path), [path])
    assert named in str(caught.value) and str(path) in str(caught.value)


async def test_bounds_and_non_json_are_refused_and_nothing_is_written(tmp_path: Path, db_path: Path) -> None:
    good = write(tmp_path, document(), "good.json")
    not_json = tmp_path / "bad.json"
    not_json.write_bytes(b"{not json")
    with pytest.raises(ImportFileError, match="not JSON"):
        await import_into_store(settings(db_path), [good, not_json])
    with pytest.raises(ImportFileError, match=r"events\[1\]: \d+ bytes, over max_event_bytes"):
        await import_into_store(settings(db_path, max_event_bytes=2048), [good])
    deep = document()
    deep["events"][0]["detail"]["nested"] = json.loads("[" * 100 + "]" * 100)
    with pytest.raises(ImportFileError, match="events"):
        await import_into_store(settings(db_path), [write(tmp_path, deep, "deep.json")])
    async with run_backend(db_path) as backend:
        assert (await backend.client.get("/battles")).json() == []


def test_the_command_line_refuses_a_bad_file_before_serving(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, broken("timestamp"))
    with pytest.raises(SystemExit) as caught:
        main(["--db", str(tmp_path / "x.sqlite3"), "--import", str(path)])
    assert caught.value.code == 2
    assert "events[1].timestamp" in capsys.readouterr().err


async def test_an_import_that_fails_midway_leaves_an_error_not_a_running_battle(tmp_path: Path, db_path: Path) -> None:
    """A store error after the battle was created must not leave it queued or running (the scheduler would try to
    run it with agents that have no launcher)."""
    from battle_backend.battles.imports import import_files
    from battle_backend.store.sqlite.store import SQLiteStore

    class FailingStore(SQLiteStore):
        appended = 0

        async def append_event(self, battle_id: str, payload: dict[str, Any], **kwargs: Any) -> Any:
            self.appended += 1
            if self.appended == 2:
                raise OSError("disk full")
            return await super().append_event(battle_id, payload, **kwargs)

    store = FailingStore(db_path)
    await store.open()
    try:
        with pytest.raises(OSError, match="disk full"):
            await import_files(store, [write(tmp_path, document())], settings(db_path))
        battle = await store.get_battle(BATTLE_ID)
        assert battle is not None and battle.state.value == "error"
        assert battle.error is not None and "import failed: OSError: disk full" in battle.error
    finally:
        await store.close()


async def test_an_import_into_postgresql_is_served_by_a_replica(tmp_path: Path, postgres_url: str) -> None:
    pg = BackendSettings(db_url=postgres_url)
    [report] = await import_into_store(pg, [write(tmp_path, document())])
    assert (report.battle_id, report.state) == (BATTLE_ID, "finished")
    [again] = await import_into_store(pg, [write(tmp_path, document())])
    assert again.state == "skipped"
    async with run_backend(tmp_path / "unused.sqlite3", db_url=postgres_url) as backend:
        battle = (await backend.client.get(f"/battles/{BATTLE_ID}")).json()
        assert battle["state"] == "finished" and battle["result"]["winner"] == "green_agent"
        assert backend.ctx.scheduler.running_count == 0
