"""tau2's own in-process replay + evaluate of a finished battle's attempts: the baseline of issue 15's 8x target.

Definition (what "tau2 replays and evaluates the same attempts" means here), per counted attempt of the battle, in
the battle's order, all with tau2's defaults:

1. replay, as tau2's orchestrator drives an environment during a simulation
   (tau2/orchestrator/orchestrator.py): a fresh environment from tau2's registry constructor
   (``registry.get_env_constructor(domain)()``: the database file read and validated), ``set_state`` with the
   task's initialization data, initialization actions and message history, ``sync_tools()``; then for every
   recorded message after that history, the orchestrator's step: each tool call of the message executed with
   ``env.get_response(tool_call)``, and ``sync_tools()`` after the message and after its tool results;
2. evaluate: tau2's unmodified ``evaluate_simulation(simulation, task, EvaluationType.ALL, solo_mode=False,
   domain)`` on the recorded simulation (the run directory read by ``launcher.cli.tau2_export.build_results``, the
   reader of ``arena export --format tau2``).

tau2's defaults: its registry constructors (no cached databases), the default GC thresholds (700, 10, 10; set for
the duration of the run and restored after), tau2's evaluator module imported as tau2 imports it (with litellm).
The agents and the user simulator are not part of it (tau2 would call LLMs there); only the environment and the
scorer, which is what a calibration battle's harness does besides talking to the agents.

``seconds`` is the wall time of steps 1-2 over all attempts; importing tau2's evaluator (~4 s, once per process) is
reported apart (``import_seconds``), as is CPU time. The battle's recorded rewards are compared with tau2's on the
way (``agreeing_rewards``); tests/green_agent/engine/test_scoring_agreement.py does the full comparison.

    .venv/bin/python benchmarks/tau2_baseline.py RUN_DIR [--json] [--in-process]

By default the CLI measures in a fresh interpreter (nothing imported or cached beforehand); from Python,
``replay_and_evaluate(run_dir)`` measures in the calling process and ``replay_and_evaluate(run_dir,
fresh_process=True)`` in a fresh one.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TAU2_DEFAULT_GC_THRESHOLDS = (700, 10, 10)
"""CPython's default thresholds, which tau2 never changes."""


@dataclass(frozen=True)
class BaselineFigure:
    """tau2's in-process replay + evaluate of one battle's attempts."""

    run_dir: str
    attempts: int
    seconds: float
    """Wall time of the replays and evaluations (import excluded)."""
    cpu_seconds: float
    replay_seconds: float
    evaluate_seconds: float
    import_seconds: float
    """Importing tau2's registry and evaluator (litellm included); 0 when the process had done it already."""
    agreeing_rewards: int
    """Attempts whose reward from tau2 equals the battle's recorded reward."""

    @property
    def per_attempt_ms(self) -> float:
        return 1000.0 * self.seconds / self.attempts if self.attempts else 0.0


def _load(run_dir: Path) -> tuple[Any, Any]:
    """The battle result and its attempts as tau2 ``Results`` (tasks and simulations)."""
    from launcher.cli.export_command import load_battles
    from launcher.cli.tau2_export import build_results

    loaded = load_battles(run_dir).results
    if len(loaded) != 1:
        raise ValueError(f"{run_dir}: expected one battle, found {len(loaded)}")
    result = loaded[0]
    from tau2.data_model.simulation import Results

    return result, Results.model_validate_json(build_results(result, run_dir).text)


def _replay(constructor: Any, task: Any, messages: list[Any]) -> None:
    """Drive a fresh environment through the recorded conversation as tau2's orchestrator does (see above)."""
    from copy import deepcopy

    state = task.initial_state
    history = deepcopy(state.message_history) if state is not None and state.message_history is not None else []
    for message in history:
        message.turn_idx = None
    env = constructor()
    env.set_state(
        initialization_data=state.initialization_data if state is not None else None,
        initialization_actions=state.initialization_actions if state is not None else None,
        message_history=history,
    )
    env.sync_tools()
    for message in messages[len(history) :]:
        if getattr(message, "role", None) == "tool":
            continue  # the environment's own answers: produced below
        env.sync_tools()  # the step that produced the message
        calls = getattr(message, "tool_calls", None) or []
        for call in calls:
            env.get_response(call)
        if calls:
            env.sync_tools()  # the environment's step


def replay_and_evaluate(run_dir: Path, *, fresh_process: bool = False) -> BaselineFigure:
    """tau2's replay + evaluate of every counted attempt of the battle in ``run_dir`` (see the module docstring).

    ``fresh_process``: measure in a new interpreter (clean imports and caches) instead of this process.
    """
    run_dir = Path(run_dir)
    if fresh_process:
        out = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), str(run_dir), "--json", "--in-process"],
            check=True,
            capture_output=True,
            text=True,
        )
        return BaselineFigure(**json.loads(out.stdout.strip().splitlines()[-1]))

    from green_agent.engine.tau.quiet import quiet_tau2

    quiet_tau2()
    already = "tau2.evaluator.evaluator" in sys.modules
    started = time.perf_counter()
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.registry import registry

    import_seconds = 0.0 if already else time.perf_counter() - started

    result, results = _load(run_dir)
    tasks = {task.id: task for task in results.tasks}
    domains = {f"{result.battle_id}/{a.task_key}/{a.attempt}": a for a in result.attempts}
    thresholds = gc.get_threshold()
    gc.set_threshold(*TAU2_DEFAULT_GC_THRESHOLDS)
    replay_s = evaluate_s = 0.0
    agreeing = 0
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        for simulation in results.simulations:
            attempt = domains[simulation.id]
            task = tasks[simulation.task_id]
            constructor = registry.get_env_constructor(attempt.domain)
            t0 = time.perf_counter()
            _replay(constructor, task, list(simulation.messages))
            t1 = time.perf_counter()
            info = evaluate_simulation(
                simulation=simulation,
                task=task,
                evaluation_type=EvaluationType.ALL,
                solo_mode=False,
                domain=attempt.domain,
            )
            t2 = time.perf_counter()
            replay_s += t1 - t0
            evaluate_s += t2 - t1
            agreeing += int(info.reward == attempt.reward)
    finally:
        gc.set_threshold(*thresholds)
    return BaselineFigure(
        run_dir=str(run_dir),
        attempts=len(results.simulations),
        seconds=time.perf_counter() - wall,
        cpu_seconds=time.process_time() - cpu,
        replay_seconds=replay_s,
        evaluate_seconds=evaluate_s,
        import_seconds=import_seconds,
        agreeing_rewards=agreeing,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("run_dir", type=Path, help="a finished battle's run directory (runs/<battle id>)")
    parser.add_argument("--json", action="store_true", help="print the figure as one JSON line")
    parser.add_argument("--in-process", action="store_true", help="measure in this interpreter (default: a new one)")
    args = parser.parse_args(argv)
    figure = replay_and_evaluate(args.run_dir, fresh_process=not args.in_process)
    if args.json:
        print(json.dumps(asdict(figure)))
    else:
        print(
            f"tau2 replay + evaluate of {figure.attempts} attempts: {figure.seconds:.1f} s wall "
            f"({figure.per_attempt_ms:.0f} ms per attempt; replay {figure.replay_seconds:.1f} s, evaluate "
            f"{figure.evaluate_seconds:.1f} s), {figure.cpu_seconds:.1f} s CPU; import {figure.import_seconds:.1f} s; "
            f"rewards equal to the battle's: {figure.agreeing_rewards}/{figure.attempts}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
