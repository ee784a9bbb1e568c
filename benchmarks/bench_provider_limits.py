"""Throughput under a provider's rate limits (issue 27): a battle with the LLM user at concurrency 64 against the fake
OpenAI-compatible server (tests/support/fake_openai.py) that enforces a concurrency limit and a tokens-per-window
limit with 429s and Retry-After, the user's calls sharing the green agent's adaptive provider cap
(green_agent/provider_limits.py).

Prints the completions answered per second between the first and the last answer against the most the server's
limits let through, their ratio (target: at least 0.8, i.e. within 20% of the limit), the 429s by limit, and the
attempts blamed on the agent (must be 0) and infrastructure errors; exits 1 when a target is missed.

    .venv/bin/python benchmarks/bench_provider_limits.py [--k 16] [--tokens-per-window 1000] [--window-s 1]

tests/green_agent/engine/test_provider_battle.py keeps the behaviour (blame and counts); the throughput depends on the
machine's load, so it lives here. Everything started here is stopped here (loopback servers, sandboxes, scoring).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

TASKS = [0, 1, 2, 3, 4, 5, 6, 8]
"""The mock tasks whose gold solution passes (calibration: every attempt should succeed)."""
TOKENS = {"prompt_tokens": 90, "completion_tokens": 10}


def customer(request: dict[str, Any]) -> Any:
    from tests.support.fake_openai import text_reply

    heard = sum(1 for m in request.get("messages", []) if m.get("role") == "user")
    if heard >= 2:
        return text_reply("Thank you, that is all. ###STOP###", usage=TOKENS)
    return text_reply("Hi, I need help with my request.", usage=TOKENS)


async def measure(args: argparse.Namespace) -> int:
    # Imported here, not at the top: the tool sandboxes' fork server re-imports this module (as __mp_main__) in
    # every sandbox it starts: 64 of them importing the engine at once is more than a loaded machine builds in time.
    from green_agent.engine.battle import Battle
    from green_agent.engine.config import BattleConfig, UserSimulatorConfig
    from green_agent.engine.results import FaultAuthor
    from green_agent.engine.tau.sandbox import SandboxFactory
    from green_agent.engine.tau.scoring import ScoringPool
    from green_agent.provider_limits import ProviderLimits
    from tests.green_agent.service.conftest import white_agent
    from tests.support.fake_openai import ProviderLimitsSpec, fake_state, make_fake_openai
    from tests.support.servers import serve_app

    os.environ.setdefault("ARENA_BENCH_USER_KEY", "sk-bench")
    limits = ProviderLimitsSpec(
        max_concurrency=args.max_concurrency,
        tokens_per_window=args.tokens_per_window,
        window_s=args.window_s,
        latency_s=args.latency_s,
    )
    app = make_fake_openai(customer, limits=limits)
    with tempfile.TemporaryDirectory() as runs:
        async with (
            serve_app(app) as llm,
            white_agent("replay") as white,
            ScoringPool(max_workers=2) as scoring,
            SandboxFactory() as sandboxes,
        ):
            user = UserSimulatorConfig(
                kind="llm",
                model="user-model",
                base_url=f"{llm}/v1",
                api_key_env="ARENA_BENCH_USER_KEY",
                max_retries=20,
            )
            config = BattleConfig(
                domain="mock",
                split="base",
                task_index=TASKS,
                k=args.k,
                concurrency=args.concurrency,
                calibration=True,
                user_simulator=user,
            )
            providers = ProviderLimits(max_concurrency=args.cap)
            battle = Battle(
                "bench-providers",
                white,
                config,
                scoring=scoring,
                runs_dir=Path(runs),
                providers=providers,
                sandboxes=sandboxes,
            )
            started = time.perf_counter()
            result = await battle.run()
            wall = time.perf_counter() - started
    state = fake_state(app)
    tokens_per_call = TOKENS["prompt_tokens"] + TOKENS["completion_tokens"]
    limit = limits.requests_per_s(tokens_per_call)
    span = (state.last_answer_at or 0.0) - (state.first_answer_at or 0.0)
    rate = (state.answered - 1) / span if span > 0 else float("nan")
    ratio = rate / limit
    blamed = sum(1 for a in result.attempts if a.failure and a.failure.fault_author == FaultAuthor.WHITE_AGENT)
    counted = result.usage.user if result.usage else None
    print(
        f"attempts {len(result.attempts)} at concurrency {args.concurrency} (k {args.k}); wall {wall:.1f} s; "
        f"operator cap {args.cap}"
    )
    print(
        f"provider limits: {args.max_concurrency} in flight x {args.latency_s} s, {args.tokens_per_window} tokens "
        f"/ {args.window_s} s ({tokens_per_call} a call): at most {limit:.2f} completions/s"
    )
    print(
        f"answered {state.answered} completions in {span:.2f} s: {rate:.2f}/s = {ratio:.2f} of the limit "
        "(target >= 0.80)"
    )
    summary_429s = counted.rate_limited if counted else "n/a"
    summary_retries = counted.retries if counted else "n/a"
    print(
        f"429s sent {state.rate_limited_total} ({state.rate_limited}); counted in the summary {summary_429s}, "
        f"retries {summary_retries}; peak in flight at the provider {state.peak_in_flight}"
    )
    print(f"blamed on the agent {blamed} (target 0); infrastructure errors {result.infrastructure_errors}")
    ok = ratio >= 0.8 and blamed == 0 and result.infrastructure_errors == 0
    print("OK" if ok else "MISSED")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--k", type=int, default=16, help="attempts per task (8 tasks)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--cap", type=int, default=32, help="the operator's provider cap (--provider-max-concurrency)")
    parser.add_argument("--max-concurrency", type=int, default=4, help="the provider's limit of calls in flight")
    parser.add_argument("--latency-s", type=float, default=0.05, help="each answered call takes this long")
    parser.add_argument("--tokens-per-window", type=int, default=1000, help="the provider's tokens per window")
    parser.add_argument("--window-s", type=float, default=1.0, help="the window (a test-sized minute)")
    return asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
