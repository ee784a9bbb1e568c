"""compare_runs on battles that are only on disk: by id (``<runs dir>/<id>/summary.json``) or by run directory path,
confined to the green agent's runs directory (paths come from a remote caller: anything outside is refused without
being opened), bounded in size, read off the event loop, and completed battles only."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from green_agent.engine.config import CertifyConfig
from green_agent.service.mcp import control as control_module
from green_agent.statistics import compare_trials
from tests.green_agent.service.mcp.conftest import GreenServer, control, error_text, structured
from tests.launcher.cli.test_compare_command import BASELINE, CANDIDATE, make_result, trials_of_outcomes, write_run

pytestmark = pytest.mark.asyncio(loop_scope="session")

REFUSED = "only battle ids and run directories in this green agent's runs directory are read"


def _ids() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"disk-cand-{tag}", f"disk-base-{tag}"


@pytest.fixture
def on_disk(green: GreenServer) -> tuple[str, str]:
    """Two completed battles written into the green agent's runs directory (not known to its registry)."""
    cand, base = _ids()
    write_run(green.runs_dir, make_result(cand, CANDIDATE))
    write_run(green.runs_dir, make_result(base, BASELINE))
    return cand, base


async def _compare(green: GreenServer, a: Any, b: Any, **options: Any) -> Any:
    async with control(green) as client:
        return await client.call_tool("compare_runs", {"a": a, "b": b, **options})


async def test_battles_on_disk_are_compared_by_id(green: GreenServer, on_disk: tuple[str, str]) -> None:
    cand, base = on_disk
    comparison = structured(await _compare(green, cand, base, n_bootstrap=300, seed=4))
    expected = compare_trials(trials_of_outcomes(CANDIDATE), trials_of_outcomes(BASELINE), n_bootstrap=300, seed=4)
    assert comparison == expected.model_dump(mode="json")
    assert comparison["per_j"][0]["pass_hat_diff"] == pytest.approx(20 / 30)
    assert comparison["per_j"][0]["pass_hat_diff_ci_low"] > 0


async def test_run_directory_paths_inside_the_runs_directory_are_accepted(
    green: GreenServer, on_disk: tuple[str, str]
) -> None:
    cand, base = on_disk
    expected = structured(await _compare(green, cand, base))
    forms = [
        (str(green.runs_dir / cand), str(green.runs_dir / base / "summary.json")),
        (f"{green.runs_dir}/{cand}/", f"{base}/summary.json"),
        (f"./{cand}", os.path.relpath(green.runs_dir / base)),
    ]
    for a, b in forms:
        assert structured(await _compare(green, a, b)) == expected, (a, b)


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "/etc/summary.json",
        "../../etc/x",
        "{runs}/../x",
        "{runs}/sub/{id}",
        "{runs}/{id}/../../elsewhere",
        "{tmp}/{id}",
        "{tmp}/{id}/summary.json",
        "~/{id}",
        "{runs}/{id}/trajectories/t.jsonl",
    ],
)
async def test_paths_outside_the_runs_directory_are_refused(
    green: GreenServer, on_disk: tuple[str, str], tmp_path: Path, path: str
) -> None:
    cand, _ = on_disk
    # A genuine run outside the runs directory: refused although it is a valid run.
    write_run(tmp_path, make_result(cand, CANDIDATE))
    value = path.format(runs=green.runs_dir, id=cand, tmp=tmp_path)
    message = error_text(await _compare(green, value, {"t": [True]}))
    assert f"a: {REFUSED}" in message
    assert str(tmp_path) not in message and "passwd" not in message  # the rejected path is not echoed


async def test_a_symbolic_link_out_of_the_runs_directory_is_not_followed(green: GreenServer, tmp_path: Path) -> None:
    outside = write_run(tmp_path, make_result("outside", CANDIDATE))
    link_dir, link_file = _ids()
    (green.runs_dir / link_dir).symlink_to(outside, target_is_directory=True)
    (green.runs_dir / link_file).mkdir()
    (green.runs_dir / link_file / "summary.json").symlink_to(outside / "summary.json")
    message = error_text(await _compare(green, link_dir, {"t": [True]}))
    assert "does not name a directory inside the runs directory" in message
    message = error_text(await _compare(green, {"t": [True]}, f"{green.runs_dir}/{link_file}"))
    assert f"b: the summary.json of battle {link_file} cannot be read" in message


async def test_unusable_summaries_are_tool_errors(green: GreenServer, tmp_path: Path) -> None:
    interrupted, unfinished = _ids()
    write_run(green.runs_dir, make_result(interrupted, BASELINE, status="interrupted"))
    (green.runs_dir / unfinished).mkdir()
    (green.runs_dir / unfinished / "attempts.jsonl").write_text("{}\n")
    broken, huge = _ids()
    (green.runs_dir / broken).mkdir()
    (green.runs_dir / broken / "summary.json").write_text('{"battle_id": "x", "attempts": []}')
    (green.runs_dir / huge).mkdir()
    with (green.runs_dir / huge / "summary.json").open("wb") as sparse:
        sparse.truncate(control_module.MAX_SUMMARY_BYTES + 1)  # sparse: no disk space used
    cases = {
        interrupted: f"a: battle {interrupted} ended with status interrupted, not completed",
        unfinished: f"a: battle {unfinished} has no summary.json (it never finished)",
        broken: f"a: the summary.json of battle {broken} is not a battle result (white_agent_url: Field required",
        huge: f"a: the summary.json of battle {huge} is not a regular file of at most 64 MB",
        "no-such-battle-on-disk": "a: no battle 'no-such-battle-on-disk' on this green agent",
    }
    for battle_id, message in cases.items():
        assert message in error_text(await _compare(green, battle_id, {"t": [True]})), battle_id


async def test_the_summary_is_read_in_a_worker_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_run(tmp_path, make_result("threaded", CANDIDATE))
    threads: list[threading.Thread] = []
    read = control_module._read_summary

    def spy(*args: Any) -> Any:
        threads.append(threading.current_thread())
        return read(*args)

    monkeypatch.setattr(control_module, "_read_summary", spy)
    registry: Any = SimpleNamespace(runs_dir=tmp_path, get=lambda battle_id: None)
    trials = await control_module._trials_of(registry, "threaded", "a")
    assert trials == trials_of_outcomes(CANDIDATE)
    assert threads and threads[0] is not threading.main_thread()
    assert threads[0] is not threading.current_thread()


async def test_a_battle_whose_tasks_stopped_at_their_first_failure_is_refused(
    green: GreenServer, on_disk: tuple[str, str]
) -> None:
    """A pass^k certify battle ran each task only up to its first failure (issue 28): compared attempt by attempt it
    would look far better at pass^4 than it is (only tasks that ran 4 attempts would count)."""
    cand, base = on_disk
    stopped_id = f"disk-stopped-{uuid.uuid4().hex[:8]}"
    stopped = make_result(stopped_id, {key: ["success", "failure"] for key in CANDIDATE})
    config = stopped.config.model_copy(update={"certify": CertifyConfig.model_validate("pass^4>=0.8")})
    write_run(green.runs_dir, stopped.model_copy(update={"config": config}))
    trials = trials_of_outcomes(BASELINE)  # given directly, the other side is read from disk all the same
    for a, b in ((stopped_id, base), (cand, stopped_id), (stopped_id, trials), (trials, stopped_id)):
        text = error_text(await _compare(green, a, b))
        assert "stopped each task at its first failure" in text and stopped_id in text, text
