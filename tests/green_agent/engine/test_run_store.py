"""The run directory as durable data (green_agent.engine.run_store): attempts appended and read back, a torn last
line dropped and cut, corruption refused with its line number, the config hash and its named differences, atomic
summary files."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from green_agent.engine.config import BattleConfig
from green_agent.engine.run_store import (
    ATTEMPTS_FILE,
    RUN_FILE,
    AttemptJournal,
    RunFileError,
    RunManifest,
    check_resumable,
    config_differences,
    config_hash,
    load_run,
    read_attempts,
    write_atomic,
)
from tests.green_agent.engine.results.builders import battle_result

ATTEMPTS = battle_result().attempts


def manifest(config: BattleConfig, tasks: list[str] | None = None) -> RunManifest:
    return RunManifest(
        battle_id="b1",
        white_agent_url="http://127.0.0.1:1",
        config=config,
        config_hash=config_hash(config),
        created_at="2026-11-23T00:00:00Z",
        tasks=tasks or [],
    )


async def journal_with(run_dir: Path, count: int) -> AttemptJournal:
    journal = AttemptJournal(run_dir)
    await journal.start(manifest(BattleConfig()), keep_bytes=None)
    for attempt in ATTEMPTS[:count]:
        await journal.append(attempt)
    return journal


def test_appended_attempts_read_back_equal_and_keyed_by_task_and_attempt(tmp_path: Path) -> None:
    asyncio.run(journal_with(tmp_path, len(ATTEMPTS)))
    stored = load_run(tmp_path)
    assert stored is not None and stored.manifest.battle_id == "b1"
    assert list(stored.attempts.attempts.values()) == ATTEMPTS
    assert set(stored.attempts.attempts) == {(a.task_key, a.attempt) for a in ATTEMPTS}
    assert stored.attempts.lines == len(ATTEMPTS) and not stored.attempts.torn
    assert stored.summary_status is None and not stored.finished


def test_concurrent_appends_keep_every_line_whole(tmp_path: Path) -> None:
    async def main() -> None:
        journal = AttemptJournal(tmp_path)
        await journal.start(manifest(BattleConfig()), keep_bytes=None)
        await asyncio.gather(*(journal.append(a) for a in ATTEMPTS * 5))

    asyncio.run(main())
    lines = (tmp_path / ATTEMPTS_FILE).read_bytes().splitlines()
    assert len(lines) == len(ATTEMPTS) * 5
    assert all(json.loads(line)["battle_id"] == "typed-1" for line in lines)


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(min_value=1, max_value=10_000))
def test_a_torn_last_line_is_dropped_and_cut_before_the_next_append(
    tmp_path_factory: pytest.TempPathFactory, cut: int
) -> None:
    run_dir = tmp_path_factory.mktemp("torn")
    asyncio.run(journal_with(run_dir, 3))
    path = run_dir / ATTEMPTS_FILE
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    whole = len(lines[0]) + len(lines[1])
    tail = lines[2][: 1 + cut % (len(lines[2]) - 1)]  # 1 .. len-1 bytes of the third line: never complete
    path.write_bytes(data[:whole] + tail)

    stored = read_attempts(path)
    assert stored.torn and stored.lines == 2 and stored.good_bytes == whole
    assert list(stored.attempts.values()) == ATTEMPTS[:2]

    async def resume() -> None:
        journal = AttemptJournal(run_dir)
        await journal.start(None, keep_bytes=stored.good_bytes)
        await journal.append(ATTEMPTS[2])

    asyncio.run(resume())
    again = read_attempts(path)
    assert not again.torn and list(again.attempts.values()) == ATTEMPTS[:3]


def test_a_complete_object_without_its_newline_is_treated_as_torn(tmp_path: Path) -> None:
    asyncio.run(journal_with(tmp_path, 2))
    path = tmp_path / ATTEMPTS_FILE
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    stored = read_attempts(path)
    assert stored.torn and list(stored.attempts.values()) == ATTEMPTS[:1]


def test_a_bad_line_before_the_end_is_corruption_named_by_line(tmp_path: Path) -> None:
    asyncio.run(journal_with(tmp_path, 3))
    path = tmp_path / ATTEMPTS_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b'{"not": "an attempt"}\n' + lines[2])
    with pytest.raises(RunFileError, match=r"attempts.jsonl: line 2 is not an attempt result"):
        read_attempts(path)


def test_a_later_line_for_the_same_attempt_wins(tmp_path: Path) -> None:
    first = ATTEMPTS[4]  # an infrastructure error
    assert first.outcome == "infra_error"
    rerun = first.model_copy(update={"outcome": "success", "reward": 1.0, "failure": None})

    async def main() -> None:
        journal = AttemptJournal(tmp_path)
        await journal.start(manifest(BattleConfig()), keep_bytes=None)
        await journal.append(first)
        await journal.append(rerun)

    asyncio.run(main())
    assert list(read_attempts(tmp_path / ATTEMPTS_FILE).attempts.values()) == [rerun]


def test_the_config_hash_ignores_concurrency_and_names_what_differs() -> None:
    base = BattleConfig(k=4, task_index=[1, 2], concurrency=4)
    assert config_hash(base) == config_hash(base.model_copy(update={"concurrency": 16}))
    changed = BattleConfig(k=2, task_index=[1, 2], concurrency=4, user_simulator={"kind": "llm", "model": "m"})
    assert config_hash(base) != config_hash(changed)
    differences = config_differences(base, changed)
    assert "k: 4 -> 2" in differences
    assert 'user_simulator.kind: "scripted" -> "llm"' in differences
    assert 'user_simulator.model: "gpt-4.1-mini" -> "m"' in differences
    assert not any(line.startswith("concurrency") for line in differences)
    prices = {"m": {"input_usd_per_million_tokens": 1, "output_usd_per_million_tokens": 2}}
    priced = BattleConfig.model_validate({**base.model_dump(), "prices": prices})
    assert config_hash(priced) != config_hash(base)  # one summary must not mix two price tables
    assert any(line.startswith("prices.m.") for line in config_differences(base, priced))


def test_check_resumable_refuses_a_changed_config_or_task_set(tmp_path: Path) -> None:
    config = BattleConfig(k=4, task_index=[1, 2])
    run_dir = tmp_path
    (run_dir / RUN_FILE).write_text(manifest(config, ["retail/test/1", "retail/test/2"]).model_dump_json())
    stored = load_run(run_dir)
    assert stored is not None
    check_resumable(stored, config.model_copy(update={"concurrency": 9}), ["retail/test/1", "retail/test/2"])
    with pytest.raises(RunFileError, match=r"seed: 0 -> 5"):
        check_resumable(stored, config.model_copy(update={"seed": 5}), ["retail/test/1", "retail/test/2"])
    with pytest.raises(RunFileError, match=r"task set differs"):
        check_resumable(stored, config, ["retail/test/1"])


def test_a_manifest_that_is_not_one_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / RUN_FILE).write_text('{"schema": "arena.run/1"}')
    with pytest.raises(RunFileError, match=r"run.json: not an Arena run manifest"):
        load_run(tmp_path)
    assert load_run(tmp_path / "missing") is None


def test_write_atomic_leaves_the_old_file_when_the_write_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "summary.json"
    write_atomic(target, "old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary file left behind


def test_atomic_files_keep_the_usual_mode_not_mkstemps_private_one(tmp_path: Path) -> None:
    fresh = tmp_path / "summary.md"
    write_atomic(fresh, "x")
    assert fresh.stat().st_mode & 0o777 == 0o644
    fresh.chmod(0o640)
    write_atomic(fresh, "y")
    assert fresh.stat().st_mode & 0o777 == 0o640 and fresh.read_text() == "y"


def test_a_stored_config_is_hashed_again_so_a_stale_stored_hash_alone_does_not_refuse(tmp_path: Path) -> None:
    config = BattleConfig(k=2, task_index=[1])
    stale = manifest(config).model_copy(update={"config_hash": "sha256:written-by-an-older-version"})
    (tmp_path / RUN_FILE).write_text(stale.model_dump_json())
    stored = load_run(tmp_path)
    assert stored is not None
    check_resumable(stored, config, [])
