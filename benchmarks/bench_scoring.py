"""Benchmark: CPU time per scored attempt in a scoring worker, before and after issue 15 (a script, not a test).

What is measured: the work of one scoring worker for one attempt, from the simulation JSON it receives to tau2's
RewardInfo (task lookup, ``SimulationRun`` validation, the evaluation), as ``time.process_time()`` around the call,
in worker processes that start cold like the green agent's (each mode in fresh interpreters), plus each worker's
start-up CPU (imports and set-up).

* ``before``: the workers as they were: tau2's ``evaluate_simulation`` (``tau2.evaluator.evaluator``, litellm
  imported at start-up), tau2's registry pointed at databases parsed once per process, GC thresholds raised.
* ``after``: the workers now (green_agent/engine/tau/scoring.py ``_worker_init`` and ``_evaluate``): tau2's checks
  combined without its evaluator module, gold hashes cached per task, lazily copied databases.

The attempts: calibration attempts of the test splits (every task's gold actions, the information to communicate
in a closing message, the user's stop), ``k`` per task, played in process on tau2 environments; or, with
``--run-dir``, the attempts of a finished battle (its trajectories, read like ``arena export --format tau2``). They
are dealt round-robin to ``--workers`` workers in battle order (round 1 of every task, then round 2...), as a
battle's scoring pool receives them, so each worker computes a task's gold once and reuses it.

    .venv/bin/python benchmarks/bench_scoring.py [--domains retail airline telecom] [--k 4] [--workers 2]
    .venv/bin/python benchmarks/bench_scoring.py --run-dir RUN_DIR
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODES = ("before", "after")


# --- the attempts --------------------------------------------------------------------------------------------------


def calibration_simulation(domain: str, split: str | None, index: int) -> dict[str, Any]:
    """A calibration attempt of one task as tau2 SimulationRun JSON: gold actions, closing message, user stop."""
    from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
    from tau2.data_model.simulation import SimulationRun, TerminationReason

    from green_agent.engine.tau.environment import build_environment
    from green_agent.engine.tau.tasks import resolve_task

    ref = resolve_task(domain, split, index)
    env, opening = build_environment(ref)
    messages: list[Any] = [*opening, UserMessage(role="user", content="Hi, I need help with my account.")]
    criteria = ref.task.evaluation_criteria
    actions = (criteria.actions or []) if criteria is not None else []
    for number, action in enumerate(actions):
        call = ToolCall(
            id=f"call_{number:03d}", name=action.name, arguments=dict(action.arguments), requestor=action.requestor
        )
        participant = AssistantMessage if action.requestor == "assistant" else UserMessage
        messages.append(participant(role=action.requestor, content=None, tool_calls=[call]))
        messages.append(env.get_response(call))
    told = (criteria.communicate_info or []) if criteria is not None else []
    messages.append(AssistantMessage(role="assistant", content="Done. " + "; ".join(told)))
    messages.append(UserMessage(role="user", content="Thanks! ###STOP###"))
    run = SimulationRun(
        id=f"{domain}/{split}/{index}",
        task_id=ref.task_id,
        start_time="2026-01-01T00:00:00",
        end_time="2026-01-01T00:00:30",
        duration=30.0,
        termination_reason=TerminationReason.USER_STOP,
        messages=[message.model_copy(update={"turn_idx": i}) for i, message in enumerate(messages)],
    )
    dumped: dict[str, Any] = run.model_dump(mode="json")
    return dumped


def _attempt(domain: str, split: str | None, index: int, simulation: dict[str, Any]) -> dict[str, Any]:
    """What the scoring pool sends a worker for one attempt (the task pickled, as ScoringPool does)."""
    from green_agent.engine.tau.tasks import resolve_task

    task = resolve_task(domain, split, index).task
    blob = base64.b64encode(pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)).decode()
    where = {"domain": domain, "split": split, "index": index, "task_id": task.id}
    return {**where, "simulation": simulation, "task": blob}


def calibration_attempts(domains: list[str], k: int) -> list[dict[str, Any]]:
    """``k`` calibration attempts of every test task of ``domains``, in battle order."""
    from green_agent.engine.tau.tasks import load_tasks

    attempts = []
    for domain in domains:
        split = None if domain == "mock" else "test"
        tasks = range(len(load_tasks(domain, split)))
        played = [_attempt(domain, split, i, calibration_simulation(domain, split, i)) for i in tasks]
        attempts += played * k
    return attempts


def run_attempts(run_dir: Path) -> list[dict[str, Any]]:
    """The scored attempts of a finished battle, in battle order."""
    from launcher.cli.export_command import load_battles
    from launcher.cli.tau2_export import build_results

    result = load_battles(run_dir).results[0]
    simulations = {s["id"]: s for s in json.loads(build_results(result, run_dir).text)["simulations"]}
    attempts = []
    for attempt in sorted(result.attempts, key=lambda a: (a.attempt, a.task_index)):
        simulation = simulations.get(f"{result.battle_id}/{attempt.task_key}/{attempt.attempt}")
        if simulation is None or simulation["termination_reason"] not in ("user_stop", "agent_stop"):
            continue
        simulation["task_id"] = attempt.task_id
        simulation.pop("reward_info", None)
        attempts.append(_attempt(attempt.domain, attempt.split, attempt.task_index, simulation))
    return attempts


# --- one worker ----------------------------------------------------------------------------------------------------


def _worker(mode: str, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """Start like a scoring worker in ``mode`` and score ``attempts``; CPU seconds of the start-up and of each."""
    import time

    started = time.process_time()
    if mode == "after":
        from green_agent.engine.tau import scoring

        scoring._worker_init()
        score = scoring._evaluate
    else:
        score = _before_worker_init()
    startup = time.process_time() - started
    seconds, rewards = [], []
    for attempt in attempts:
        blob = base64.b64decode(attempt["task"]) if mode == "after" else None  # the old workers resolved the task
        t = time.process_time()
        where = (attempt["domain"], attempt["split"], attempt["index"], attempt["task_id"])
        answer = score(*where, attempt["simulation"], False, blob) if blob else score(*where, attempt["simulation"])
        seconds.append(time.process_time() - t)
        if "ok" not in answer:
            raise RuntimeError(f"{mode}: scoring failed: {answer}")
        rewards.append(answer["ok"]["reward"])
    return {"startup": startup, "seconds": seconds, "rewards": rewards, "litellm": "litellm" in sys.modules}


def _before_worker_init() -> Any:
    """The worker as it was before issue 15: tau2's evaluator imported at start-up, cached databases, GC raised."""
    import gc

    from green_agent.engine.tau.quiet import quiet_tau2

    quiet_tau2()
    import tau2.evaluator.evaluator  # noqa: F401  (with litellm, as the old initializer did)

    from green_agent.engine.tau import scoring

    gc.set_threshold(100_000, 50, 100)
    scoring._use_cached_databases()

    def score(domain: str, split: str | None, index: int, task_id: str, simulation: dict[str, Any]) -> dict[str, Any]:
        from tau2.data_model.simulation import SimulationRun
        from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

        from green_agent.engine.tau.tasks import resolve_task

        ref = resolve_task(domain, split, index)
        run = SimulationRun.model_validate(simulation)
        info = evaluate_simulation(
            simulation=run, task=ref.task, evaluation_type=EvaluationType.ALL, solo_mode=False, domain=domain
        )
        return {"ok": info.model_dump(mode="json")}

    return score


def measure(mode: str, attempts: list[dict[str, Any]], workers: int) -> list[dict[str, Any]]:
    """Each worker's share of ``attempts`` (round-robin) scored in a fresh interpreter, one after the other."""
    figures = []
    with tempfile.TemporaryDirectory(prefix="bench-scoring-") as work:
        for number in range(workers):
            share = attempts[number::workers]
            path = Path(work) / f"share{number}.json"
            path.write_text(json.dumps(share))
            out = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--worker", mode, "--input", str(path)],
                check=True,
                capture_output=True,
                text=True,
                env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            )
            figure = json.loads(out.stdout.strip().splitlines()[-1])
            figure["domains"] = [a["domain"] for a in share]
            figures.append(figure)
    return figures


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    median, mean = 1000 * statistics.median(values), 1000 * statistics.mean(values)
    return f"median {median:6.1f}  mean {mean:6.1f}  p90 {1000 * p90:6.1f}"


def report(results: dict[str, list[dict[str, Any]]]) -> None:
    domains = list(dict.fromkeys(d for figure in results["after"] for d in figure["domains"]))
    for mode, figures in results.items():
        startup = ", ".join(f"{f['startup']:.2f}" for f in figures)
        litellm = any(f["litellm"] for f in figures)
        print(f"{mode:>6}: worker start-up CPU s {startup}; litellm imported: {litellm}")
    for domain in domains:
        line = []
        for mode, figures in results.items():
            values = [s for f in figures for s, d in zip(f["seconds"], f["domains"], strict=True) if d == domain]
            line.append(f"{mode} {_ms(values)}")
            count = len(values)
        print(f"{domain:>8} ({count} attempts) ms CPU per attempt: " + " | ".join(line))
    before = [r for f in results["before"] for r in f["rewards"]]
    after = [r for f in results["after"] for r in f["rewards"]]
    print(f"rewards identical in both modes: {before == after} ({sum(r == 1.0 for r in after)}/{len(after)} at 1.0)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--domains", nargs="+", default=["retail", "airline", "telecom"])
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--run-dir", type=Path, help="score a finished battle's attempts instead")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args.worker, json.loads(args.input.read_text()))))
        return 0
    from green_agent.engine.tau.quiet import quiet_tau2

    quiet_tau2()
    attempts = run_attempts(args.run_dir) if args.run_dir else calibration_attempts(args.domains, args.k)
    print(f"{len(attempts)} attempts, {args.workers} workers, load {os.getloadavg()[0]:.2f}")
    results = {mode: measure(mode, attempts, args.workers) for mode in args.modes}
    report(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
