"""``arena view runs/``: a folder of run directories becomes the runs home's import files. Folder detection (a run,
a folder of runs, neither: exit 2 naming it), a hostile folder (a link out, a 2 GB sparse file, broken JSON, a copy,
markup in a name: each skipped or shown escaped, never a crash), and the import extension (``runs_home``): the
statistics are ``arena compare``'s own, refusals are its words, the cap on pairs is said on the page."""

from __future__ import annotations

import html
import json
import os
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from battle_backend import BackendSettings
from battle_backend.__main__ import import_into_store
from battle_backend.battles.imports import load_import_file
from launcher.cli.compare_command import CompareError, build_report, read_local_run
from launcher.cli.runs_home import HOME_FILE, MAX_SKIPPED, build_home, is_run_dir, scan_folder
from launcher.cli.view_command import EXIT_NOT_A_RUN, view_command
from launcher.cli.view_import import RunDirError, build_import
from tests.support.run_folders import get_text, make_result, outcomes_at, sample_folder, serve_home, tasks, write_run


def local_app() -> typer.Typer:
    app = typer.Typer()
    app.command()(view_command)
    return app


def skipped_reasons(folder: Path, tmp_path: Path) -> dict[str, str]:
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    return dict(build_home(folder, workdir).skipped)


def test_a_run_a_folder_of_runs_and_neither(tmp_path: Path) -> None:
    paths = sample_folder(tmp_path / "runs")
    assert is_run_dir(paths["retail-v1"]) and not is_run_dir(tmp_path / "runs")
    shown, skipped, over = scan_folder(tmp_path / "runs")
    assert sorted(p.name for p in shown) == sorted(paths) and skipped == [] and over == 0
    neither = tmp_path / "neither"
    (neither / "logs").mkdir(parents=True)
    (neither / "notes.txt").write_text("x", encoding="utf-8")
    wide = {"COLUMNS": "500"}
    outcome = CliRunner().invoke(local_app(), [str(neither), "--no-wait"], env=wide)
    assert outcome.exit_code == EXIT_NOT_A_RUN
    assert f"{neither} is not an Arena run directory (no run.json nor summary.json) nor a folder" in outcome.output
    assert "none of its 1 subdirectories is one" in outcome.output
    outcome = CliRunner().invoke(local_app(), [str(paths["retail-v1"]), "--no-wait"], env=wide)
    assert outcome.exit_code == 0, outcome.output  # a run directory: its battle page, as before
    assert "/ui/battles/retail-v1" in outcome.output and "runs home" not in outcome.output


def test_arena_view_on_a_folder_serves_the_runs_home(tmp_path: Path) -> None:
    sample_folder(tmp_path / "runs")
    outcome = CliRunner().invoke(local_app(), [str(tmp_path / "runs"), "--no-wait"], env={"COLUMNS": "300"})
    assert outcome.exit_code == 0, outcome.output
    assert "4 runs" in outcome.output and "1 comparisons" in outcome.output
    line = next(line for line in outcome.output.splitlines() if line.startswith("runs home: "))
    assert line.startswith("runs home: http://127.0.0.1:") and line.endswith("/ui/runs")


def test_a_hostile_folder_skips_what_it_cannot_show_and_never_crashes(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    paths = sample_folder(runs)
    outside = write_run(tmp_path / "elsewhere", make_result("outside-run", outcomes_at(5, tasks(4))))
    (runs / "link-out").symlink_to(outside)
    sparse = shutil.copytree(paths["retail-v1"], runs / "sparse")
    with (sparse / "summary.json").open("r+b") as handle:
        handle.truncate(2 * 1024**3)  # 2 GB, sparse: refused by its size before any read
    broken = shutil.copytree(paths["retail-v1"], runs / "broken")
    (broken / "summary.json").write_text('{"schema": "arena.battle-result/1", "battle_id": ', encoding="utf-8")
    leak = shutil.copytree(paths["retail-v1"], runs / "leak")
    (leak / "summary.json").unlink()
    (leak / "summary.json").symlink_to(outside / "summary.json")
    shutil.copytree(paths["retail-v2"], runs / "copy-of-v2")
    os.utime(runs / "copy-of-v2", (0, 0))  # the oldest: the original is read first
    marked = write_run(runs, make_result("marked", outcomes_at(5, tasks(4))), name='<img src=x onerror="alert(1)">')
    quiet = write_run(runs, make_result("quiet", outcomes_at(5, tasks(4))))
    (quiet / "events.jsonl").write_text("", encoding="utf-8")  # an empty events file (crashed build_import)
    assert build_import(quiet).events > 0

    reasons = skipped_reasons(runs, tmp_path)
    assert "symbolic link" in reasons["link-out"]
    assert "2147483648 bytes, over the limit" in reasons["sparse"], reasons["sparse"]
    assert "summary.json" in reasons["broken"] and "cannot be read" in reasons["broken"]
    assert "summary.json" in reasons["leak"] and "outside" in reasons["leak"], reasons["leak"]
    assert "retail-v2 again" in reasons["copy-of-v2"]
    assert marked.name not in reasons and "quiet" not in reasons


async def test_the_page_shows_skipped_runs_and_escapes_names(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    sample_folder(runs)
    write_run(runs, make_result("marked", outcomes_at(5, tasks(4))), name="<img src=x onerror=alert(1)>")
    broken = runs / "broken"
    broken.mkdir()
    (broken / "summary.json").write_text("{not json", encoding="utf-8")
    async with serve_home(runs, tmp_path) as (url, _):
        _, page = await get_text(f"{url}/ui/runs")
        assert "&lt;img src=x onerror=alert(1)&gt;" in page and "<img src=x" not in page
        skipped = html.unescape(page.split('id="runs-skipped"')[1])
        assert "broken" in skipped and "summary.json" in skipped


def test_the_home_file_carries_arena_compare_s_reports_and_refusals(tmp_path: Path) -> None:
    paths = sample_folder(tmp_path / "runs")
    workdir = tmp_path / "work"
    workdir.mkdir()
    built = build_home(tmp_path / "runs", workdir)
    assert built.files[0].name == HOME_FILE and len(built.files) == 5
    parsed, events, result = load_import_file(built.files[0], BackendSettings())
    assert parsed.battle is None and events == [] and result is None and parsed.runs_home is not None
    home = parsed.runs_home
    assert {run.battle_id for run in home.runs} == set(paths) and len(home.comparisons) == 6
    document = json.loads(built.files[0].read_text(encoding="utf-8"))["runs_home"]
    entry = next(c for c in document["comparisons"] if {c["a"], c["b"]} == {"retail-v1", "retail-v2"})
    expected = build_report(
        read_local_run(paths["retail-v2"]),
        read_local_run(paths["retail-v1"]),
        sources=(str(paths["retail-v2"]), str(paths["retail-v1"])),
    )
    assert entry["a"] == "retail-v2" and entry["report"] == expected.model_dump(mode="json")
    refused = next(c for c in document["comparisons"] if {c["a"], c["b"]} == {"retail-v1", "retail-new-tau2"})
    with pytest.raises(CompareError) as said:
        build_report(read_local_run(paths["retail-new-tau2"]), read_local_run(paths["retail-v1"]))
    assert refused["refusal"] == str(said.value) and "report" not in refused
    for path in built.files[1:]:
        battle, _, _ = load_import_file(path, BackendSettings())
        assert battle.battle is not None


async def test_pairs_over_the_cap_say_which_command_compares_them(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for i in range(4):
        write_run(runs, make_result(f"r{i}", outcomes_at(2 + 2 * i, tasks(20)), started_at=f"2026-11-2{i}T00:00:00Z"))
    workdir = tmp_path / "work"
    workdir.mkdir()
    built = build_home(runs, workdir, max_pairs=2)
    assert built.comparisons == 2 and built.pairs_not_computed == 4
    home = json.loads(built.files[0].read_text(encoding="utf-8"))["runs_home"]
    assert {(c["a"], c["b"]) for c in home["comparisons"]} == {("r3", "r2"), ("r3", "r1")}  # the newest first
    assert home["limits"] == {"max_runs": 100, "max_pairs": 2, "runs_over_cap": 0, "pairs_not_computed": 4}
    settings = BackendSettings(db_path=tmp_path / "db.sqlite3")
    reports = await import_into_store(settings, built.files)
    assert [report.state for report in reports] == ["home", *["finished"] * 4]


async def test_a_battle_file_the_backend_refuses_moves_its_run_to_skipped(tmp_path: Path) -> None:
    sample_folder(tmp_path / "runs")
    workdir = tmp_path / "work"
    workdir.mkdir()
    built = build_home(tmp_path / "runs", workdir)
    settings = BackendSettings(db_path=tmp_path / "db.sqlite3", max_event_bytes=16_000, max_result_bytes=20_000)
    reports = await import_into_store(settings, built.files)
    home = next(report.runs_home for report in reports if report.runs_home is not None)
    assert [run.battle_id for run in home.runs] == ["airline-a"]
    assert len(home.skipped) == 3 and all("the backend refused its battle" in s.reason for s in home.skipped)
    assert all("max_result_bytes" in s.reason for s in home.skipped)


def test_an_entry_that_cannot_be_read_is_skipped_not_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry that vanishes or cannot be read while the folder is listed (permissions, a run being deleted) is one
    skipped row with its reason; the other runs are still shown."""
    paths = sample_folder(tmp_path / "runs")
    (tmp_path / "runs" / "gone").mkdir()
    real = is_run_dir

    def flaky(path: Path) -> bool:
        if path.name == "gone":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr("launcher.cli.runs_home.is_run_dir", flaky)
    shown, skipped, over = scan_folder(tmp_path / "runs")
    assert sorted(p.name for p in shown) == sorted(paths) and over == 0
    assert skipped == [("gone", "cannot be read (Permission denied)")]


def test_a_folder_without_runs_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="no subdirectory"):
        scan_folder(tmp_path)


def test_runs_past_the_import_budget_are_skipped_with_the_command_that_shows_them(tmp_path: Path) -> None:
    paths = sample_folder(tmp_path / "runs")
    workdir = tmp_path / "work"
    workdir.mkdir()
    one = len(json.dumps(build_import(paths["retail-v1"]).document).encode())
    built = build_home(tmp_path / "runs", workdir, max_import_bytes=int(one * 1.5))
    assert 1 <= built.runs < 4 and len(built.files) == built.runs + 1
    assert sum(path.stat().st_size for path in built.files[1:]) <= one * 1.5
    reasons = dict(built.skipped)
    assert len(reasons) == 4 - built.runs
    assert all("over what one view imports" in r and "`arena view " in r for r in reasons.values())


def test_a_folder_of_many_non_runs_still_imports_its_home(tmp_path: Path) -> None:
    paths = sample_folder(tmp_path / "runs")
    for index in range(1100):
        (tmp_path / "runs" / f"logs-{index:04d}").mkdir()
    workdir = tmp_path / "work"
    workdir.mkdir()
    built = build_home(tmp_path / "runs", workdir)
    assert built.runs == len(paths) and len(built.skipped) == 1100
    parsed, _, _ = load_import_file(workdir / HOME_FILE, BackendSettings(db_path=tmp_path / "db.sqlite3"))
    assert parsed.runs_home is not None and len(parsed.runs_home.runs) == len(paths)
    skipped = parsed.runs_home.skipped
    assert len(skipped) <= MAX_SKIPPED and skipped[-1].name == "…" and "101 more entries" in skipped[-1].reason
