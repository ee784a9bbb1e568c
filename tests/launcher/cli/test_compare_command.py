"""``arena compare`` on pairs of battles with a known difference, written the way the green agent writes them
(green_agent.engine.report.write_run_dir): the verdict and its interval must be ``compare_trials``' own numbers,
flipped and unmatched tasks are listed, partial runs are compared with a warning, and bad input exits 2 without
writing anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from green_agent.engine.config import BattleConfig
from green_agent.engine.report import render_markdown, write_run_dir
from green_agent.engine.results import AttemptResult, BattleResult, Failure, FailureCategory, FaultAuthor, ResultStatus
from green_agent.statistics import compare_trials, summarize_trials
from launcher.cli.app import app
from launcher.cli.compare_command import CompareError, read_run, trials_of

Outcomes = dict[str, list[str]]
"""task key (domain/split/index) -> outcomes by attempt ("success", "failure", "infra_error")."""


def make_result(battle_id: str, outcomes: Outcomes, *, status: ResultStatus = "completed") -> BattleResult:
    """A battle through the public models, with the summary computed as the battle computes it."""
    attempts: list[AttemptResult] = []
    for key, runs in outcomes.items():
        domain, split, index = key.split("/")
        for number, outcome in enumerate(runs, start=1):
            failure = None
            if outcome == "failure":
                failure = Failure(category=FailureCategory.TASK_INCOMPLETE, fault_author=FaultAuthor.WHITE_AGENT)
            elif outcome == "infra_error":
                failure = Failure(
                    category=FailureCategory.USER_SIMULATOR_ERROR, fault_author=FaultAuthor.USER_SIMULATOR
                )
            attempts.append(
                AttemptResult(
                    battle_id=battle_id,
                    domain=domain,
                    split=split,
                    task_index=int(index),
                    task_id=f"tau2-{index}",
                    attempt=number,
                    context_id=f"ctx-{key}-{number}",
                    outcome=outcome,
                    reward=None if outcome == "infra_error" else float(outcome == "success"),
                    termination_reason="user_stop",
                    failure=failure,
                )
            )
    trials = trials_of_outcomes(outcomes)
    failures: dict[str, int] = {}
    for attempt in attempts:
        if attempt.failure is not None:
            failures[attempt.failure.category.value] = failures.get(attempt.failure.category.value, 0) + 1
    domains = sorted({key.split("/")[0] for key in outcomes})
    return BattleResult(
        battle_id=battle_id,
        white_agent_url=f"http://white-{battle_id}:9004",
        config=BattleConfig(k=4, domain=domains[0]) if len(domains) == 1 else BattleConfig(mode="all", domain=domains),
        started_at="2026-11-22T00:00:00Z",
        finished_at="2026-11-22T00:01:00Z",
        duration_s=60.0,
        attempts=attempts,
        summary=summarize_trials(trials, n_bootstrap=50),
        failure_breakdown=failures,
        infrastructure_errors=sum(1 for a in attempts if a.outcome == "infra_error"),
        status=status,
    )


def trials_of_outcomes(outcomes: Outcomes) -> dict[str, list[bool | None]]:
    return {key: [None if o == "infra_error" else o == "success" for o in runs] for key, runs in outcomes.items()}


def write_run(root: Path, result: BattleResult) -> Path:
    """runs/<battle id>/ as the green agent writes it."""
    directory = root / result.battle_id
    write_run_dir(directory, result, render_markdown(result), [])
    return directory


def tasks(count: int, start: int = 0, domain: str = "retail") -> list[str]:
    return [f"{domain}/test/{i}" for i in range(start, start + count)]


CANDIDATE: Outcomes = {key: ["success"] * 4 for key in tasks(30)}
"""A: succeeds on every trial of all 30 tasks."""
BASELINE: Outcomes = {key: (["failure"] * 4 if i < 20 else ["success"] * 4) for i, key in enumerate(tasks(30))}
"""B: fails every trial of tasks 0..19, succeeds on 20..29."""


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["compare", *args])


def compare_json(*args: str) -> dict[str, Any]:
    outcome = invoke(*args, "--json")
    assert outcome.exit_code == 0, outcome.output
    data: dict[str, Any] = json.loads(outcome.stdout)
    return data


@pytest.fixture
def known_difference(tmp_path: Path) -> tuple[Path, Path]:
    return (
        write_run(tmp_path, make_result("cand-1", CANDIDATE)),
        write_run(tmp_path, make_result("base-1", BASELINE)),
    )


def test_a_known_improvement_is_better_with_compare_trials_own_numbers(known_difference: tuple[Path, Path]) -> None:
    run_a, run_b = known_difference
    data = compare_json(str(run_a), str(run_b))
    expected = compare_trials(
        trials_of_outcomes(CANDIDATE), trials_of_outcomes(BASELINE), n_bootstrap=2000, seed=0, confidence=0.95
    )
    assert data["comparison"] == expected.model_dump(mode="json")
    one = data["comparison"]["per_j"][0]
    assert one["tasks_paired"] == 30 and one["pass_hat_a"] == 1.0 and one["pass_hat_b"] == pytest.approx(10 / 30)
    assert one["pass_hat_diff"] == pytest.approx(20 / 30)
    assert (one["a_better"], one["b_better"], one["ties"]) == (20, 0, 10)
    assert one["sign_test_p_value"] == pytest.approx(2 * 0.5**20)
    verdict = data["verdict"]
    assert verdict["outcome"] == "better" and verdict["j"] == 1
    assert verdict["ci_low"] == expected.per_j[0].pass_hat_diff_ci_low and verdict["ci_low"] > 0.4
    assert verdict["ci_high"] == expected.per_j[0].pass_hat_diff_ci_high and verdict["ci_high"] <= 0.9
    assert verdict["text"].startswith("A is better") and "95% interval" in verdict["text"]
    assert verdict["test"] == "sign_flip_monte_carlo" and verdict["p_value"] < 0.05 and verdict["mde"] > 0
    flips = data["flips"]
    assert [f["task_key"] for f in flips["better_in_a"]] == tasks(20)  # equal differences: in task order
    assert flips["better_in_a"][0] == {
        "task_key": "retail/test/0",
        "successes_a": 4,
        "n_a": 4,
        "successes_b": 0,
        "n_b": 4,
        "rate_diff": 1.0,
    }
    assert flips["better_in_b"] == []
    assert data["unmatched"] == {"only_in_a": [], "only_in_b": []} and data["warnings"] == []
    assert list(data) == ["schema", "a", "b", "comparison", "verdict", "flips", "unmatched", "warnings", "cost"]
    # These results carry no usage: every cost and latency figure is unknown, never a made-up 0.
    assert len(data["cost"]) == 7 and {(row["a"], row["b"]) for row in data["cost"][1:]} == {("n/a", "n/a")}
    assert data["cost"][0]["a"] == data["cost"][0]["b"] == "n/a / n/a / n/a (0 turns)"
    assert data["schema"] == "arena.compare/1"
    assert data["a"]["battle_id"] == "cand-1" and data["a"]["role"] == "candidate" and data["a"]["k"] == 4
    assert data["b"]["battle_id"] == "base-1" and data["b"]["role"] == "baseline"
    assert data["b"]["counted_trials"] == 120 and data["b"]["domains"] == ["retail"]


def test_swapping_the_sides_makes_a_worse(known_difference: tuple[Path, Path]) -> None:
    run_a, run_b = known_difference
    data = compare_json(str(run_b / "summary.json"), str(run_a), "--seed", "3", "--n-bootstrap", "500")
    expected = compare_trials(trials_of_outcomes(BASELINE), trials_of_outcomes(CANDIDATE), n_bootstrap=500, seed=3)
    assert data["comparison"] == expected.model_dump(mode="json")
    assert data["verdict"]["outcome"] == "worse" and data["verdict"]["ci_high"] < 0
    assert data["verdict"]["text"].startswith("A is worse")
    assert len(data["flips"]["better_in_b"]) == 20 and data["flips"]["better_in_a"] == []


def test_the_text_report_names_runs_verdict_rule_and_flips(known_difference: tuple[Path, Path]) -> None:
    run_a, run_b = known_difference
    outcome = invoke(str(run_a), str(run_b), "--confidence", "0.9")
    assert outcome.exit_code == 0, outcome.output
    text = outcome.stdout
    for expected in ("cand-1", "base-1", "http://white-cand-1:9004", "completed", "A (candidate)", "B (baseline)"):
        assert expected in text
    expected_ci = compare_trials(
        trials_of_outcomes(CANDIDATE), trials_of_outcomes(BASELINE), n_bootstrap=2000, seed=0, confidence=0.9
    ).per_j[0]
    assert ("verdict (pass^1): A is better (pass^1 A-B = +0.667; p = ") in text
    assert (
        f"90% interval [{expected_ci.pass_hat_diff_ci_low:+.3f}, {expected_ci.pass_hat_diff_ci_high:+.3f}] excludes 0)"
    ) in text
    assert "better in A: 20 task(s)" in text and "better in B" not in text
    assert "retail/test/19" in text and "retail/test/20 " not in text
    assert "4/4" in text and "0/4" in text


def test_no_difference_when_the_runs_trade_tasks(tmp_path: Path) -> None:
    keys = tasks(12)
    a: Outcomes = {key: ["success", "success", "failure", "failure"] for key in keys}
    b = dict(a)
    for key in keys[:4]:
        a[key] = ["success"] * 4  # A better on 0..3
    for key in keys[4:7]:
        b[key] = ["success"] * 4  # B better on 4..6
    run_a, run_b = write_run(tmp_path, make_result("a", a)), write_run(tmp_path, make_result("b", b))
    data = compare_json(str(run_a), str(run_b))
    expected = compare_trials(trials_of_outcomes(a), trials_of_outcomes(b), n_bootstrap=2000, seed=0)
    assert data["comparison"] == expected.model_dump(mode="json")
    assert data["comparison"]["per_j"][0]["pass_hat_diff"] == pytest.approx(0.5 / 12)  # A ahead, not significantly
    assert data["verdict"]["outcome"] == "no_difference"
    assert data["verdict"]["ci_low"] < 0 < data["verdict"]["ci_high"]
    assert data["verdict"]["text"].startswith("no significant difference at 95% (pass^1 A-B = +0.042;")
    assert [f["task_key"] for f in data["flips"]["better_in_a"]] == keys[:4]
    assert [f["task_key"] for f in data["flips"]["better_in_b"]] == keys[4:7]
    assert data["flips"]["better_in_b"][0]["successes_a"] == 2 and data["flips"]["better_in_b"][0]["successes_b"] == 4
    text = invoke(str(run_a), str(run_b)).stdout
    assert "no significant difference at 95%" in text and "includes 0" in text
    assert "better in A: 4 task(s)" in text and "better in B: 3 task(s)" in text


def test_unmatched_tasks_and_other_domains_are_listed_with_warnings(tmp_path: Path) -> None:
    a: Outcomes = {key: ["success"] * 4 for key in tasks(10)}
    a.update({key: ["failure"] * 4 for key in tasks(2, domain="airline")})
    b: Outcomes = {key: ["success"] * 4 for key in tasks(10, start=5)}
    run_a, run_b = write_run(tmp_path, make_result("a", a)), write_run(tmp_path, make_result("b", b))
    data = compare_json(str(run_a), str(run_b))
    assert data["unmatched"] == {
        "only_in_a": ["airline/test/0", "airline/test/1", *tasks(5)],
        "only_in_b": tasks(5, start=10),
    }
    assert data["comparison"]["tasks_in_both"] == 5
    assert "the runs cover different domains (A: airline, retail; B: retail)" in data["warnings"]
    assert any(w.startswith("only 5 paired task(s): intervals are valid but wide") for w in data["warnings"])
    assert any(w.startswith("the task sets differ: 7 task(s) only in A, 5 only in B") for w in data["warnings"])
    text = invoke(str(run_a), str(run_b)).stdout
    assert "only in A (7, not paired): airline/test/0, airline/test/1, retail/test/0," in text
    assert "only in B (5, not paired): retail/test/10, retail/test/11" in text
    assert "warning: the task sets differ" in text


@pytest.mark.parametrize("status", ["interrupted", "cancelled", "error"])
def test_a_partial_run_is_compared_with_a_warning_naming_its_status(tmp_path: Path, status: ResultStatus) -> None:
    partial = {key: runs[:2] for key, runs in list(BASELINE.items())[:25]}  # stopped halfway
    run_a = write_run(tmp_path, make_result("a", CANDIDATE))
    run_b = write_run(tmp_path, make_result("b", partial, status=status))
    outcome = invoke(str(run_a), str(run_b), "--json")
    assert outcome.exit_code == 0, outcome.output
    data = json.loads(outcome.stdout)
    warning = f"B (battle b) ended with status {status}: only the attempts that finished are compared"
    assert warning in data["warnings"] and f"warning: {warning}" in outcome.stderr
    assert data["b"]["status"] == status and data["comparison"]["tasks_in_both"] == 25
    assert data["comparison"]["k_max"] == 2 and data["verdict"]["outcome"] == "better"
    assert warning in invoke(str(run_a), str(run_b)).stdout


def test_infrastructure_errors_are_not_counted(tmp_path: Path) -> None:
    a: Outcomes = {"retail/test/0": ["success", "infra_error", "success", "success"], "retail/test/1": ["success"] * 4}
    b: Outcomes = {"retail/test/0": ["infra_error"] * 4, "retail/test/1": ["failure", "success", "success", "success"]}
    run_a, run_b = write_run(tmp_path, make_result("a", a)), write_run(tmp_path, make_result("b", b))
    data = compare_json(str(run_a), str(run_b))
    assert data["a"]["counted_trials"] == 7 and data["a"]["infrastructure_errors"] == 1
    assert data["comparison"]["per_j"][0]["tasks_paired"] == 1  # task 0 has no counted trial in B
    assert data["flips"]["better_in_a"] == [
        {"task_key": "retail/test/1", "successes_a": 4, "n_a": 4, "successes_b": 3, "n_b": 4, "rate_diff": 0.25}
    ]
    assert any("no counted trial on one side" in w and "retail/test/0" in w for w in data["warnings"])


def _listing(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*"))


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[str, str]]:
    good = write_run(tmp_path / "runs", make_result("good", CANDIDATE))
    never_finished = tmp_path / "runs" / "crashed"
    never_finished.mkdir()
    (never_finished / "attempts.jsonl").write_text("{}\n")
    (never_finished / "events.jsonl").write_text("")
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    (tmp_path / "broken.json").write_text('{"battle_id": "x", "attempts": [')
    invalid = json.loads((good / "summary.json").read_text())
    del invalid["white_agent_url"]
    invalid["attempts"][3]["outcome"] = "maybe"
    (tmp_path / "invalid.json").write_text(json.dumps(invalid))
    elsewhere = write_run(tmp_path / "elsewhere", make_result("airline-only", {"airline/test/0": ["success"] * 4}))
    return {
        "never finished": (
            str(never_finished),
            "has attempts (attempts.jsonl) but no summary.json: the battle never finished; resume it with "
            "`arena run SCENARIO --resume`",
        ),
        "empty": (str(tmp_path / "empty"), "an empty directory, not a run"),
        "runs dir": (str(tmp_path / "runs"), "a directory of runs, not a run; pass one of them, e.g."),
        "other dir": (str(tmp_path / "other"), "not a run directory: no summary.json (it holds: notes.txt)"),
        "missing": (str(tmp_path / "nope"), "no such file or directory"),
        "not json": (str(tmp_path / "broken.json"), f"{tmp_path / 'broken.json'}: not JSON"),
        "invalid": (str(tmp_path / "invalid.json"), "white_agent_url: Field required"),
        "invalid field": (str(tmp_path / "invalid.json"), "attempts.3.outcome"),
        "nothing in common": (str(elsewhere), "no task in common: A (battle airline-only, status completed)"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "never finished",
        "empty",
        "runs dir",
        "other dir",
        "missing",
        "not json",
        "invalid",
        "invalid field",
        "nothing in common",
    ],
)
def test_bad_input_exits_2_with_the_reason_and_writes_nothing(tmp_path: Path, case: str) -> None:
    source, message = _bad_inputs(tmp_path)[case]
    before = _listing(tmp_path)
    outcome = invoke(source, str(tmp_path / "runs" / "good"), "--json")
    assert outcome.exit_code == 2, outcome.output
    assert message in outcome.stderr and outcome.stderr.startswith("error: ")
    assert outcome.stdout == ""
    assert _listing(tmp_path) == before


def test_bad_options_exit_2(known_difference: tuple[Path, Path]) -> None:
    run_a, run_b = known_difference
    outcome = invoke(str(run_a), str(run_b), "--confidence", "1.5")
    assert outcome.exit_code == 2 and "confidence" in outcome.stderr
    assert invoke(str(run_a), str(run_b), "--n-bootstrap", "-1").exit_code == 2
    outcome = invoke("../etc", "x", "--backend", "http://127.0.0.1:9")
    assert outcome.exit_code == 2 and "not a battle id" in outcome.stderr
    outcome = invoke("a-1", "b-1", "--backend", "ftp://example.org")
    assert outcome.exit_code == 2 and "expected an http(s) URL" in outcome.stderr


def test_n_bootstrap_zero_hides_the_per_j_intervals_but_not_the_decision(known_difference: tuple[Path, Path]) -> None:
    # --n-bootstrap is kept for old scripts; the decision no longer resamples, so it is still made.
    data = compare_json(*(str(p) for p in known_difference), "--n-bootstrap", "0")
    assert data["comparison"]["per_j"][0]["pass_hat_diff_ci_low"] is None
    assert data["verdict"]["outcome"] == "better" and data["verdict"]["ci_low"] is not None
    assert data["comparison"]["per_j"][0]["pass_hat_diff"] == pytest.approx(20 / 30)


def _backend(results: dict[str, BattleResult]) -> httpx.MockTransport:
    """GET /battles/{id} as our backend answers it: the record, its result detail the BattleResult."""

    def handle(request: httpx.Request) -> httpx.Response:
        battle_id = request.url.path.rsplit("/", 1)[-1]
        if request.method != "GET" or battle_id not in results:
            return httpx.Response(404, json={"detail": "no such battle"})
        detail = results[battle_id].model_dump(mode="json")
        record = {"battle_id": battle_id, "state": "finished", "result": {"winner": "draw", "detail": detail}}
        return httpx.Response(200, json=record)

    return httpx.MockTransport(handle)


def test_battles_are_read_from_a_backend() -> None:
    a, b = make_result("cand-1", CANDIDATE), make_result("base-1", BASELINE)
    transport = _backend({"cand-1": a, "base-1": b})
    read = read_run("cand-1", "http://backend.test/", transport=transport)
    assert read == a and trials_of(read) == trials_of_outcomes(CANDIDATE)
    with pytest.raises(CompareError, match=r"GET http://backend.test/battles/missing answered HTTP 404"):
        read_run("missing", "http://backend.test", transport=transport)


def test_an_unreachable_backend_exits_2() -> None:
    outcome = invoke("a-1", "b-1", "--backend", "http://127.0.0.1:9")
    assert outcome.exit_code == 2 and "did not answer" in outcome.stderr
