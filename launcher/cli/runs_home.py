"""``arena view runs/``: a folder of run directories as import files for the runs home page and its compare view.

Why here: the home lists every run (status, domains, tasks, k, pass^k with its interval, failure mix, cost, date,
short fingerprint) and compares any two with the statistics of ``arena compare``. The backend imports nothing of
the green agent, so those statistics are computed here with ``arena compare``'s own code
(:func:`launcher.cli.compare_command.build_report`, A = the newer run) and handed over in the ``runs_home`` section
of an ``arena.battle-import/1`` file (battle_backend/battles/runs_home.py documents it). Each run is also imported
as a battle (:func:`launcher.cli.view_import.build_import`), so every row opens its battle page.

The folder is hostile input, read in a worker thread with bounds:

* entries: at most :data:`MAX_ENTRIES` are looked at; hidden names and plain files are ignored; a symbolic link is
  skipped (not followed: it may lead out of the folder); a subdirectory that is not a run is skipped with why;
* runs: at most :data:`MAX_RUNS`, the most recently modified first; the others are counted and the page says so;
  their import files together at most :data:`MAX_IMPORT_BYTES` (a run past it is skipped, with why);
* every file of a run is read through green_agent.run_files (links out, FIFOs, oversize files refused); a run that
  cannot be read (broken or oversized summary.json, a bad manifest, an invalid battle id, a battle id another run
  already has) is skipped with the reason, which the page shows; it never stops the others;
* comparisons: every pair of runs is looked at (a refusal such as "no task in common" or "the fingerprints differ"
  is cheap and always recorded); at most :data:`MAX_PAIRS` comparable pairs get their statistics, the newest runs
  first; the page tells the user to run ``arena compare A B`` for the others.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from green_agent.engine.battle_ids import BattleIdError, validate_battle_id
from green_agent.engine.fingerprint import incomparabilities
from green_agent.engine.results import BattleResult
from green_agent.engine.run_store import RUN_FILE, SUMMARY_FILE
from green_agent.run_files import run_file_exists
from launcher.cli.compare_command import CompareError, build_report, read_local_run
from launcher.cli.view_import import IMPORT_SCHEMA, RunDirError, RunImport, build_import, write_import

log = logging.getLogger(__name__)

MAX_ENTRIES: Final = 10_000
"""Folder entries looked at (a folder of a million files is not read to the end)."""
MAX_RUNS: Final = 100
"""Runs shown (and imported): each is a battle in the throwaway backend, and n runs make n(n-1)/2 pairs."""
MAX_PAIRS: Final = 100
"""Comparable pairs whose statistics are precomputed: about 30 ms each for 30 tasks x 4 attempts on an idle core
(benchmarks/bench_runs_home.py: 30 runs of one domain read in 1.5 s, plus 5 s for 100 pairs on a loaded 2-core
machine, 2.5 s of CPU)."""
MAX_IMPORT_BYTES: Final = 1024**3
"""All the runs' import files together (their conversations make most of it): runs past it are skipped, with why."""
MAX_TEXT: Final = 4000
MAX_LIST: Final = 2000
MAX_WARNINGS: Final = 32
MAX_SKIPPED: Final = 1000
"""Skipped entries the home file lists (battle_backend.battles.runs_home.MAX_RUNS: a longer list is refused whole);
the last one says how many more there were."""
HOME_FILE: Final = "runs-home.json"

STATUS: Final = {"completed": "finished", "interrupted": "interrupted", "cancelled": "cancelled", "error": "error"}


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a run's manifest or summary (whatever their state: reading them decides the rest)."""
    return run_file_exists(path, RUN_FILE) or run_file_exists(path, SUMMARY_FILE)


@dataclass
class HomeBuild:
    """What :func:`build_home` wrote: the import files (the home's first) and what the console says."""

    files: list[Path] = field(default_factory=list)
    runs: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    comparisons: int = 0
    refusals: int = 0
    pairs_not_computed: int = 0
    runs_over_cap: int = 0


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clipped(value: Any) -> Any:
    """A JSON value with every string clipped and every list cut to the section's bounds."""
    if isinstance(value, str):
        return _clip(value)
    if isinstance(value, list):
        return [_clipped(item) for item in value[:MAX_LIST]]
    if isinstance(value, dict):
        return {key: _clipped(item) for key, item in value.items()}
    return value


def scan_folder(folder: Path) -> tuple[list[Path], list[tuple[str, str]], int]:
    """The run directories of ``folder`` to show (most recently modified first, at most :data:`MAX_RUNS`), the
    entries skipped with why, and how many runs the cap left out. Blocking; :class:`RunDirError` when the folder
    cannot be listed or holds no run directory."""
    found: list[tuple[float, Path]] = []
    skipped: list[tuple[str, str]] = []
    not_runs = 0
    try:
        with os.scandir(folder) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_ENTRIES:
                    skipped.append(("…", f"the folder has more than {MAX_ENTRIES} entries: the rest were not read"))
                    break
                if entry.name.startswith("."):
                    continue
                try:  # one entry that vanishes or cannot be read is skipped, not the whole folder
                    info = entry.stat(follow_symlinks=False)
                    run = stat.S_ISDIR(info.st_mode) and is_run_dir(Path(entry.path))
                except OSError as error:
                    skipped.append((entry.name, f"cannot be read ({error.strerror or error})"))
                    continue
                if stat.S_ISLNK(info.st_mode):
                    skipped.append((entry.name, "a symbolic link: not followed (it may lead out of the folder)"))
                elif run:
                    found.append((info.st_mtime, Path(entry.path)))
                elif stat.S_ISDIR(info.st_mode):
                    not_runs += 1
                    skipped.append((entry.name, f"not a run directory (no {RUN_FILE} nor {SUMMARY_FILE})"))
    except OSError as error:
        raise RunDirError(f"{folder}: cannot be listed ({error.strerror or error})") from None
    if not found:
        what = f"none of its {not_runs} subdirectories is one" if not_runs else "it has no subdirectory"
        raise RunDirError(
            f"{folder} is not an Arena run directory (no {RUN_FILE} nor {SUMMARY_FILE}) nor a folder of run "
            f"directories ({what})"
        )
    found.sort(key=lambda item: (-item[0], item[1].name))
    shown = [path for _, path in found[:MAX_RUNS]]
    over = len(found) - len(shown)
    return shown, skipped, over


def _score(result: BattleResult, k: int) -> tuple[int | None, float | None, float | None, float | None]:
    macro = [m for m in result.summary.macro if m.pass_hat_mean is not None]
    if not macro:
        return None, None, None, None
    record = next((m for m in macro if m.j == k), max(macro, key=lambda m: m.j))
    return record.j, record.pass_hat_mean, record.pass_hat_ci_low, record.pass_hat_ci_high


def short_fingerprint(result: BattleResult | None) -> tuple[str | None, str]:
    """10 hex digits of what the run was scored on besides its tasks (tau2 build, domain files, user simulator),
    and the same in words; (None, "") for a run without a fingerprint."""
    if result is None or result.fingerprint is None:
        return None, ""
    fingerprint = result.fingerprint
    data = fingerprint.model_dump(mode="json", exclude={"tasks"})
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:10]
    user = fingerprint.user_simulator
    words = (
        f"tau2 {fingerprint.tau2.distribution} {fingerprint.tau2.version}; user simulator {user.kind}"
        + (f" ({user.model})" if user.model else "")
        + f"; domains {', '.join(sorted(fingerprint.domains))}"
    )
    return digest, _clip(words)


def home_row(run: RunImport, path: Path, import_file: str) -> dict[str, Any]:
    """The ``runs`` entry of one run (battle_backend.battles.runs_home.HomeRun)."""
    result, config = run.result, run.config
    assert config is not None  # build_import always sets it
    k = config.k
    attempts = result.attempts if result is not None else run.attempt_results
    domains = sorted({a.domain for a in attempts}) or (
        [config.domain] if isinstance(config.domain, str) else sorted(config.domain)
    )
    if result is not None:
        mix = dict(result.failure_breakdown)
        infra = result.infrastructure_errors
    else:
        mix = {}
        for attempt in attempts:
            if attempt.failure is not None:
                mix[attempt.failure.category.value] = mix.get(attempt.failure.category.value, 0) + 1
        infra = sum(1 for a in attempts if a.outcome == "infra_error")
    j, value, low, high = _score(result, k) if result is not None else (None, None, None, None)
    fingerprint, fingerprint_text = short_fingerprint(result)
    usage = result.usage if result is not None else None
    return {
        "battle_id": run.battle_id,
        "name": _clip(path.name, 256),
        "path": _clip(str(path)),
        "import_file": import_file,
        "status": STATUS.get(result.status, "error") if result is not None else "running",
        "domains": [_clip(d, 256) for d in domains[:64]],
        "tasks": run.planned_tasks or len({a.task_key for a in attempts}),
        "k": k,
        "j": j,
        "pass_hat": value,
        "ci_low": low,
        "ci_high": high,
        "failure_mix": {_clip(name, 256): count for name, count in sorted(mix.items())[:64]},
        "infrastructure_errors": infra,
        "attempts": len(attempts),
        "cost_usd": usage.total_cost_usd if usage is not None else None,
        "date": _clip((result.started_at if result is not None else run.created_at) or "", 64),
        "fingerprint": fingerprint,
        "fingerprint_text": fingerprint_text,
        "calibration": bool(result.calibration if result is not None else config.calibration),
        "warnings": [_clip(w) for w in run.warnings[:MAX_WARNINGS]],
    }


def _read_run(path: Path, seen: dict[str, str]) -> RunImport | str:
    """The run's import, or why it is skipped."""
    try:
        run = build_import(path)
    except RunDirError as error:
        return str(error)
    except Exception as error:  # a run is hostile input: whatever it provokes skips it, never the others
        log.debug("run directory %s", path, exc_info=True)
        return f"cannot be read: {type(error).__name__}: {error}"
    if run.result is None and run_file_exists(path, SUMMARY_FILE):
        return next((w for w in run.warnings if SUMMARY_FILE in w), f"{SUMMARY_FILE} cannot be read")
    try:
        validate_battle_id(run.battle_id)
    except BattleIdError as error:
        return f"its battle id cannot be shown ({error})"
    if run.battle_id in seen:
        return f"battle {run.battle_id} again (also in {seen[run.battle_id]}): a copy of a run is shown once"
    return run


@dataclass(frozen=True)
class _Compared:
    battle_id: str
    path: Path
    result: BattleResult | None
    date: str


def _pair(a: _Compared, b: _Compared, budget_left: bool) -> dict[str, Any] | None:
    """The ``comparisons`` entry of A (newer) against B: the report, the refusal, or None (not precomputed)."""
    entry: dict[str, Any] = {"a": a.battle_id, "b": b.battle_id}
    for side in (a, b):
        if side.result is None:
            try:
                read_local_run(side.path)
            except CompareError as error:
                return {**entry, "refusal": _clip(str(error))}
            return None
    assert a.result is not None and b.result is not None
    if not budget_left:
        common = {x.task_key for x in a.result.attempts} & {x.task_key for x in b.result.attempts}
        if common and not incomparabilities(a.result.fingerprint, b.result.fingerprint, common):
            return None  # comparable, over the cap: the page says which command compares them
    try:
        report = build_report(a.result, b.result, sources=(str(a.path), str(b.path)))
    except CompareError as error:
        return {**entry, "refusal": _clip(str(error))}
    return {**entry, "report": _clipped(report.model_dump(mode="json"))}


def comparisons(runs: list[_Compared], max_pairs: int = MAX_PAIRS) -> tuple[list[dict[str, Any]], int]:
    """Every pair of ``runs`` (newest first, A the newer), at most ``max_pairs`` with statistics; the entries and
    how many comparable pairs the cap left out."""
    ordered = sorted(runs, key=lambda r: (r.date, r.battle_id), reverse=True)
    entries: list[dict[str, Any]] = []
    computed = left_out = 0
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            entry = _pair(a, b, budget_left=computed < max_pairs)
            if entry is None:
                left_out += a.result is not None and b.result is not None
                continue
            computed += "report" in entry
            entries.append(entry)
    return entries, left_out


def _skipped_section(skipped: list[tuple[str, str]]) -> list[dict[str, str]]:
    """The ``skipped`` entries, at most :data:`MAX_SKIPPED`: past it, the last says how many more there were."""
    if len(skipped) > MAX_SKIPPED:
        more = len(skipped) - (MAX_SKIPPED - 1)
        skipped = [*skipped[: MAX_SKIPPED - 1], ("…", f"{more} more entries skipped (not listed here)")]
    return [{"name": _clip(name), "reason": _clip(reason)} for name, reason in skipped]


def build_home(
    folder: Path, workdir: Path, *, max_pairs: int = MAX_PAIRS, max_import_bytes: int = MAX_IMPORT_BYTES
) -> HomeBuild:
    """Write the runs home's import file and one per run into ``workdir`` (the home's first in
    :attr:`HomeBuild.files`). Blocking (call it in a worker thread); :class:`RunDirError` when ``folder`` holds no
    run directory."""
    paths, skipped, over = scan_folder(folder)
    build = HomeBuild(skipped=list(skipped), runs_over_cap=over)
    rows: list[dict[str, Any]] = []
    compared: list[_Compared] = []
    seen: dict[str, str] = {}
    total = 0
    for index, path in enumerate(paths):
        run = _read_run(path, seen)
        if isinstance(run, str):
            build.skipped.append((path.name, _clip(run)))
            continue
        name = f"run-{index:04d}.json"
        size = write_import(run.document, workdir / name)
        if total + size > max_import_bytes:
            (workdir / name).unlink()
            reason = f"its battle ({size} bytes with its conversations) is over what one view imports "
            build.skipped.append((path.name, reason + f"({max_import_bytes} bytes in all): `arena view {path}`"))
            continue
        total += size
        seen[run.battle_id] = path.name
        build.files.append(workdir / name)
        row = home_row(run, path, name)
        rows.append(row)
        compared.append(_Compared(run.battle_id, path, run.result, row["date"]))
    entries, build.pairs_not_computed = comparisons(compared, max_pairs)
    build.runs = len(rows)
    build.comparisons = sum(1 for e in entries if "report" in e)
    build.refusals = len(entries) - build.comparisons
    home = {
        "schema": IMPORT_SCHEMA,
        "runs_home": {
            "folder": _clip(str(folder)),
            "runs": rows,
            "skipped": _skipped_section(build.skipped),
            "comparisons": entries,
            "limits": {
                "max_runs": MAX_RUNS,
                "max_pairs": max_pairs,
                "runs_over_cap": over,
                "pairs_not_computed": build.pairs_not_computed,
            },
        },
    }
    write_import(home, workdir / HOME_FILE)
    build.files.insert(0, workdir / HOME_FILE)
    return build
