"""Fixtures of the adversarial tests.

* ``green`` -- the shared green agent subprocess (one per session; restarted before a test when an earlier test left
  it dead or unresponsive, so one wedged agent fails one test, not the rest);
* ``green_factory`` -- dedicated green agents for the tests that may wedge, starve or kill one (stopped with their
  whole process tree after the test; the finaliser checks that nothing of theirs is left running);
* ``hostile`` -- the hostile white agent (one server per session, behaviour reset to "malformed" for each test);
* ``replay_white`` -- the repo's reference replay agent as a subprocess (well-behaved control battles).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.harness import GreenAgent, ReferenceWhite, alive, describe, kill_all, wait_all_gone
from tests.adversarial.hostile_agent import HostileAgent, malformed, serve_hostile

MOCK_TASK: dict[str, Any] = {"mode": "manual", "domain": "mock", "split": "base", "task_id": 0}
"""tau2 mock task 0 ("create a task called 'Important Meeting' for user_1"): builds in < 1 ms, scores fast."""
RETAIL_TASK: dict[str, Any] = {"mode": "manual", "domain": "retail", "split": "test", "task_id": 0}
"""retail/test/0: the retail domain has the ``calculate`` tool."""
LIMITS: dict[str, Any] = {"k": 2, "max_steps": 6, "turn_timeout_s": 10.0, "attempt_timeout_s": 60.0}


def battle_config(base: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """A small battle: mock task 0 by default, k=2, max_steps 6, 10 s turns, 60 s attempts."""
    return {**(base or MOCK_TASK), **LIMITS, **overrides}


@pytest.fixture(scope="session")
def operator_token() -> str:
    return "adv-" + secrets.token_urlsafe(24)


@pytest.fixture(scope="session")
def adversarial_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("adversarial")


class GreenManager:
    """Keeps one healthy shared green agent; starts a fresh one when the current one is dead or unresponsive."""

    def __init__(self, root: Path, token: str) -> None:
        self.root = root
        self.token = token
        self.current: GreenAgent | None = None
        self.restarts = 0

    def get(self) -> GreenAgent:
        if self.current is not None and not self.current.healthy(timeout_s=3.0):
            print(f"\n[adversarial] the shared green agent (pid {self.current.pid}) is unhealthy: restarting it")
            self.current.stop(grace_s=2)
            self.current = None
            self.restarts += 1
        if self.current is None:
            # A new runs dir per green agent: runs/ sits two levels below root, so "../x" stays inside root.
            runs = self.root / f"shared-{self.restarts}" / "runs"
            self.current = GreenAgent.start(runs_dir=runs, token=self.token, log_dir=self.root / "logs")
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None


@pytest.fixture(scope="session")
def green_manager(adversarial_root: Path, operator_token: str) -> Iterator[GreenManager]:
    manager = GreenManager(adversarial_root, operator_token)
    try:
        yield manager
    finally:
        manager.close()


@pytest.fixture
def green(green_manager: GreenManager) -> GreenAgent:
    """The shared green agent, healthy at the start of the test."""
    return green_manager.get()


@pytest.fixture
def green_factory(
    adversarial_root: Path, operator_token: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., GreenAgent]]:
    """Start dedicated green agents: ``green_factory(extra_args=[...])``; all stopped (whole tree) after the test."""
    started: list[GreenAgent] = []
    name = request.node.name.replace("/", "_").replace("[", "_").replace("]", "")[:60]

    def start(**options: Any) -> GreenAgent:
        index = len(started)
        runs = adversarial_root / f"{name}-{index}" / "runs"
        green = GreenAgent.start(runs_dir=runs, token=operator_token, log_dir=adversarial_root / "logs", **options)
        started.append(green)
        return green

    try:
        yield start
    finally:
        leftovers = []
        for green in started:
            green.stop()
            leftovers += alive([green.process, *green.seen_descendants])
        if leftovers:
            kill_all(leftovers)
            wait_all_gone(leftovers, 5)
            pytest.fail(f"harness: processes of a dedicated green agent survived its stop: {describe(leftovers)}")


@pytest.fixture(scope="session")
def hostile_server() -> Iterator[HostileAgent]:
    agent = HostileAgent()
    with serve_hostile(agent):
        yield agent


@pytest.fixture
def hostile(hostile_server: HostileAgent) -> Iterator[HostileAgent]:
    """The hostile white agent, answering "malformed" until the test sets a behaviour."""
    hostile_server.set_behaviour(malformed())
    yield hostile_server
    errors = list(hostile_server.errors)
    hostile_server.set_behaviour(malformed())
    assert not errors, "harness: a hostile behaviour raised:\n" + "\n".join(errors)


@pytest.fixture(scope="session")
def replay_white(adversarial_root: Path) -> Iterator[ReferenceWhite]:
    white = ReferenceWhite.start(kind="replay", log_dir=adversarial_root / "logs")
    try:
        yield white
    finally:
        white.stop()
