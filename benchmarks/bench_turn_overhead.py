"""Benchmark: the attempt loop's own cost per turn, beyond the A2A round trip.

What is measured: real calibration attempts of the retail test split played by the real attempt loop
(:func:`green_agent.engine.attempt.run_attempt`): the real tool sandboxes, the real scripted user, the real
trajectory files, the real turn protocol (first message, action parsing, tool results) and the real meter. Only the
two parties whose cost is not the harness's are replaced:

- the white agent by an in-process channel that answers at once with the task's gold actions, one per turn, then one
  ``respond`` carrying every ``communicate_info`` string (what the replay reference agent does over A2A): its time is
  the "A2A round trip" and is measured and subtracted;
- the scorer by one that answers reward 1 at once (scoring is measured by benchmarks/bench_scoring.py).

Per turn (one message to the white agent and its reply handled):

    harness overhead = (attempt wall time - white channel time - sandbox start - tool execution in the sandbox) / turns

and, separately, the tool round trip to the sandbox process (pipe + tau2's tool code) per tool call. Target from
issue 15: <= 5 ms per turn.

    .venv/bin/python benchmarks/bench_turn_overhead.py [--tasks 40] [--rounds 3] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from green_agent.engine.attempt import AttemptDeps, AttemptSpec, run_attempt  # noqa: E402
from green_agent.engine.config import BattleConfig  # noqa: E402
from green_agent.engine.results import RewardBreakdown  # noqa: E402
from green_agent.engine.tau.sandbox import SandboxFactory, SandboxInit, ToolSandbox  # noqa: E402
from green_agent.engine.tau.scoring import ScoredSimulation  # noqa: E402
from green_agent.engine.tau.tasks import TaskRef, resolve_task  # noqa: E402
from green_agent.engine.tau.users import make_user  # noqa: E402
from green_agent.engine.white_client import WhiteReply  # noqa: E402


@dataclass
class Clocks:
    """Seconds spent outside the harness's own code, summed over one round of attempts."""

    white_s: float = 0.0
    sandbox_start_s: float = 0.0
    tool_s: float = 0.0
    turns: int = 0
    tool_calls: int = 0
    per_call_s: list[float] = field(default_factory=list)


def _action(name: str, arguments: dict[str, Any]) -> str:
    return "<json>" + json.dumps({"name": name, "arguments": arguments}) + "</json>"


class InstantReplay:
    """A white channel answering at once with the task's gold actions, then the final statement."""

    def __init__(self, ref: TaskRef, clocks: Clocks) -> None:
        criteria = ref.task.evaluation_criteria
        actions = list(criteria.actions or []) if criteria else []
        info = list(criteria.communicate_info or []) if criteria else []
        self._replies = [_action(a.name, dict(a.arguments)) for a in actions if a.requestor == "assistant"]
        self._replies.append(_action("respond", {"content": "Done. Details: " + "; ".join(info) + "."}))
        self._clocks = clocks

    def __call__(self, url: str, *, turn_timeout_s: float) -> InstantReplay:
        return self

    async def __aenter__(self) -> InstantReplay:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def send(
        self,
        *,
        context_id: str,
        text: str,
        data: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> WhiteReply:
        started = time.perf_counter()
        reply = self._replies.pop(0) if self._replies else _action("respond", {"content": "Goodbye."})
        answer = WhiteReply(text=reply, kind="message", echoed_context_id=context_id)
        self._clocks.white_s += time.perf_counter() - started
        self._clocks.turns += 1
        return answer


class InstantScorer:
    """Reward 1 at once: scoring is not the loop's cost."""

    async def score(self, ref: TaskRef, simulation: dict[str, Any]) -> RewardBreakdown:
        return RewardBreakdown(reward=1.0)

    async def score_explained(self, ref: TaskRef, simulation: dict[str, Any]) -> ScoredSimulation:
        return ScoredSimulation(RewardBreakdown(reward=1.0))


class TimedSandboxes(SandboxFactory):
    """The real sandboxes, with the time to start one and each tool round trip taken off the harness's account."""

    def __init__(self, clocks: Clocks) -> None:
        super().__init__()
        self.clocks = clocks

    async def open(self, ref: TaskRef) -> tuple[ToolSandbox, SandboxInit]:
        started = time.perf_counter()
        sandbox, init = await super().open(ref)
        self.clocks.sandbox_start_s += time.perf_counter() - started
        real_call = sandbox.call
        clocks = self.clocks

        async def timed_call(call: dict[str, Any], *, timeout_s: float, large: bool = False) -> dict[str, Any]:
            t0 = time.perf_counter()
            try:
                return await real_call(call, timeout_s=timeout_s, large=large)
            finally:
                elapsed = time.perf_counter() - t0
                clocks.tool_s += elapsed
                clocks.tool_calls += 1
                clocks.per_call_s.append(elapsed)

        sandbox.call = timed_call  # type: ignore[method-assign]
        return sandbox, init


@dataclass
class RoundFigure:
    attempts: int
    turns: int
    tool_calls: int
    wall_s: float
    overhead_ms_per_turn: float
    tool_ms_per_call: float
    sandbox_start_ms: float
    white_ms_per_turn: float


async def one_round(refs: list[TaskRef], sandboxes: TimedSandboxes, trajectories: Path) -> RoundFigure:
    """Every task once, one attempt after another (no concurrency: nothing else shares the loop)."""
    clocks = Clocks()
    sandboxes.clocks = clocks
    config = BattleConfig(domain="retail", split="test", calibration=True, k=2)
    wall = 0.0
    for number, ref in enumerate(refs, start=1):
        deps = AttemptDeps(
            config=config,
            scoring=InstantScorer(),
            white_channels=InstantReplay(ref, clocks),
            user_factory=make_user,
            user_api_key=None,
            trajectories_dir=trajectories,
            sandboxes=sandboxes,
        )
        started = time.perf_counter()
        result = await run_attempt(AttemptSpec("bench-overhead", ref, number, "http://white.invalid"), deps)
        wall += time.perf_counter() - started
        if result.outcome != "success":
            raise RuntimeError(f"{ref.key}: the instant replay did not succeed: {result.failure}")
    own = wall - clocks.white_s - clocks.sandbox_start_s - clocks.tool_s
    return RoundFigure(
        attempts=len(refs),
        turns=clocks.turns,
        tool_calls=clocks.tool_calls,
        wall_s=wall,
        overhead_ms_per_turn=1000 * own / clocks.turns,
        tool_ms_per_call=1000 * statistics.median(clocks.per_call_s) if clocks.per_call_s else 0.0,
        sandbox_start_ms=1000 * clocks.sandbox_start_s / len(refs),
        white_ms_per_turn=1000 * clocks.white_s / clocks.turns,
    )


@contextlib.asynccontextmanager
async def _sandboxes() -> AsyncIterator[TimedSandboxes]:
    factory = TimedSandboxes(Clocks())
    async with factory:
        yield factory


async def measure(tasks: int = 40, rounds: int = 3, profile: bool = False) -> dict[str, Any]:
    """Run ``rounds`` rounds over the first ``tasks`` retail test tasks; the first round warms up and is reported
    apart. Returns the figures of the best (least disturbed) later round and all rounds."""
    refs = [resolve_task("retail", "test", index) for index in range(tasks)]
    figures: list[RoundFigure] = []
    profiler = cProfile.Profile() if profile else None
    with tempfile.TemporaryDirectory(prefix="arena-overhead-") as tmp:
        async with _sandboxes() as sandboxes:
            for number in range(rounds):
                if profiler is not None and number == rounds - 1:
                    profiler.enable()
                figures.append(await one_round(refs, sandboxes, Path(tmp) / f"round-{number}"))
                if profiler is not None and number == rounds - 1:
                    profiler.disable()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    later = figures[1:] or figures
    best = min(later, key=lambda f: f.overhead_ms_per_turn)
    return {
        "overhead_ms_per_turn": round(best.overhead_ms_per_turn, 3),
        "tool_ms_per_call": round(best.tool_ms_per_call, 3),
        "sandbox_start_ms": round(best.sandbox_start_ms, 2),
        "turns": best.turns,
        "tool_calls": best.tool_calls,
        "attempts": best.attempts,
        "rounds": [f.__dict__ for f in figures],
        "load": os.getloadavg(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=40, help="retail test tasks per round (max 40)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the first one warms up")
    parser.add_argument("--profile", action="store_true", help="cProfile the last round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.tasks, args.rounds, args.profile))
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(
        f"harness overhead per turn: {figures['overhead_ms_per_turn']:.2f} ms (target <= 5 ms) over "
        f"{figures['turns']} turns of {figures['attempts']} attempts; tool round trip to the sandbox "
        f"{figures['tool_ms_per_call']:.2f} ms per call (median); sandbox start {figures['sandbox_start_ms']:.1f} ms "
        f"per attempt; load {figures['load'][0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
