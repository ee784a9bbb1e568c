"""A battle worked by a pool of green agents (issue 29), all on loopback: backend replicas (PostgreSQL or SQLite),
a reference white agent behind the delay proxy of benchmarks/bench_latency_hiding.py, and ``arena-green`` processes
with ``--pool NAME --pool-backend URL --pool-key-file PATH --pool-capacity N --pool-worker-id ID``.

The end-to-end test (tests/green_agent/service/test_pool_battle.py) and benchmarks/bench_pool_battle.py use it; no
pytest here. Battles are created through the backend's API as AgentBeats creates them (agents registered without
launchers, ``POST /battles`` with the config), so the green agent the battle is created for is its owner.

Every process started here belongs to one :class:`launcher.processes.ProcessGroup`; every descendant ever seen of a
green agent (sandboxes, scoring workers) is remembered, and whatever of them outlives the ``async with`` (e.g. after
:meth:`PoolCluster.kill`, which SIGKILLs a green agent's whole tree as a dying machine would) is killed at exit.

    async with pool_cluster(tmp_path, db=postgres_url, replicas=2) as cluster:
        white = await cluster.start_white(kind="replay", delay_s=1.0)
        owner = await cluster.start_green("a", pool_backend=cluster.backends[0], capacity=8)
        battle_id = await cluster.start_battle(owner, white.delayed_url, config)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil

from green_agent.service.attempt_lease_client import AttemptLeaseClient, AttemptLeaseError
from green_agent.wire.attempt_leases import AttemptOut
from launcher.ports import free_port, loopback_url
from launcher.processes import ManagedProcess, ProcessGroup, wait_until_ready

REPO = Path(__file__).resolve().parents[2]
DELAY_PROXY = REPO / "benchmarks" / "bench_latency_hiding.py"
POOL = "arena-pool"
OPERATOR_TOKEN = "arena-pool-test-operator-token-0123456789"
WHITE_REQUIREMENT = [{"role": "blue_agent", "name": "white_agent", "required": True}]
START_LIMIT_S = 180.0
"""Upper bound on a process becoming ready on a loaded machine (only turns a hang into a failure)."""

T = TypeVar("T")


class ClusterError(AssertionError):
    """Something the cluster waited for did not happen: the message says what, and the logs' tails say why."""


class BattleFailed(AssertionError):
    """The backend has the battle in state error."""


@dataclass
class Green:
    """One ``arena-green`` process."""

    name: str
    url: str
    runs_dir: Path
    worker_id: str | None
    """Its worker id in the pool (None: not in a pool)."""
    pool_backend: str | None
    proc: ManagedProcess
    killed: bool = False

    def summary(self, battle_id: str) -> Path:
        return self.runs_dir / battle_id / "summary.json"


@dataclass
class White:
    """The reference white agent and the delay proxy in front of it."""

    direct_url: str
    delayed_url: str


@dataclass
class PoolCluster:
    """The processes of one pooled battle set-up; see the module's docstring."""

    root: Path
    group: ProcessGroup
    http: httpx.AsyncClient
    key: str
    key_file: Path
    backends: list[str] = field(default_factory=list)
    greens: dict[str, Green] = field(default_factory=dict)
    _seen: dict[int, psutil.Process] = field(default_factory=dict)
    _agent_ids: dict[str, str] = field(default_factory=dict)

    # --- processes -------------------------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key != "ARENA_POOL_KEY"}
        env.update({"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "ARENA_OPERATOR_TOKEN": OPERATOR_TOKEN})
        return env

    async def start_backends(self, db: str, replicas: int = 1) -> list[str]:
        """``replicas`` backend processes on ``db`` (a PostgreSQL URL for more than one); returns their URLs."""
        started: list[tuple[ManagedProcess, str]] = []
        for number in range(replicas):
            port = free_port()
            url = loopback_url(port)
            argv = [sys.executable, "-m", "battle_backend", "--port", str(port), "--db", db, "--log-level", "warning"]
            argv += ["--ready-poll-interval", "0.5", "--battle-timeout-default", "3600"]
            started.append((self.group.start(f"backend-{number}", argv, env=self.env(), cwd=REPO), url))
        for proc, url in started:
            await wait_until_ready(proc, url + "/health", timeout_s=START_LIMIT_S)
            self.backends.append(url)
        return [url for _, url in started]

    async def start_white(
        self, *, kind: str = "replay", delay_s: float, seed: int = 0, fault_rates: Mapping[str, float] | None = None
    ) -> White:
        """The reference white agent (``kind``: replay, or flaky with seeded ``fault_rates``) and the delay proxy
        (every A2A call waits ``delay_s``); the agent's card announces the proxy."""
        white_port, proxy_port = free_port(), free_port()
        direct, delayed = loopback_url(white_port), loopback_url(proxy_port)
        argv = [sys.executable, "-m", "white_agent", "--kind", kind, "--host", "127.0.0.1", "--port", str(white_port)]
        argv += ["--card-url", delayed + "/", "--log-level", "warning"]
        if kind == "flaky":
            argv += ["--seed", str(seed)]
            if fault_rates:
                argv += ["--fault-rate", *(f"{name}={rate}" for name, rate in fault_rates.items())]
        white = self.group.start("white", argv, env=self.env(), cwd=REPO)
        proxy_argv = [sys.executable, str(DELAY_PROXY), "proxy", "--port", str(proxy_port), "--upstream", direct]
        proxy = self.group.start("delay-proxy", [*proxy_argv, "--delay", str(delay_s)], env=self.env(), cwd=REPO)
        await wait_until_ready(white, direct + "/.well-known/agent-card.json", timeout_s=START_LIMIT_S)
        await wait_until_ready(proxy, delayed + "/.well-known/agent-card.json", timeout_s=START_LIMIT_S)
        return White(direct_url=direct, delayed_url=delayed)

    async def start_green(
        self,
        name: str,
        *,
        pool_backend: str | None,
        capacity: int = 8,
        extra: list[str] | None = None,
    ) -> Green:
        """``arena-green`` on a free port with its own runs dir; in the pool (worker id ``green-NAME``) when
        ``pool_backend`` is given."""
        port = free_port()
        url = loopback_url(port)
        runs_dir = self.root / f"runs-{name}"
        argv = [sys.executable, "-m", "green_agent", "--host", "127.0.0.1", "--port", str(port), "--card-url", url]
        argv += ["--runs-dir", str(runs_dir), "--log-level", "warning", "--scoring-workers", "1", "--workers", "1"]
        argv += ["--max-concurrency", "64", "--max-attempts-in-flight", "64"]
        worker_id = None
        if pool_backend is not None:
            worker_id = f"green-{name}"
            argv += ["--pool", POOL, "--pool-backend", pool_backend, "--pool-key-file", str(self.key_file)]
            argv += ["--pool-capacity", str(capacity), "--pool-worker-id", worker_id]
        proc = self.group.start(f"green-{name}", [*argv, *(extra or [])], env=self.env(), cwd=REPO)
        await wait_until_ready(proc, url + "/health", timeout_s=START_LIMIT_S)
        green = Green(name, url, runs_dir, worker_id, pool_backend, proc)
        self.greens[name] = green
        self.remember_descendants()
        return green

    def remember_descendants(self) -> None:
        """Note every process now under one of our green agents (to stop what a SIGKILL leaves behind)."""
        for green in self.greens.values():
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(green.proc.pid).children(recursive=True):
                    self._seen.setdefault(child.pid, child)

    def kill(self, green: Green) -> None:
        """``kill -9`` of the green agent and everything under it, as when its machine dies."""
        self.remember_descendants()
        victims: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(green.proc.pid)
            victims = [root, *root.children(recursive=True)]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(green.proc.pid, signal.SIGKILL)
        for victim in victims:
            with contextlib.suppress(psutil.Error):
                victim.kill()
        green.proc.popen.wait(timeout=30)
        green.killed = True

    async def stop(self, green: Green) -> None:
        """Stop one green agent cleanly (SIGTERM, then SIGKILL)."""
        self.remember_descendants()
        await self.group.stop(green.proc)

    def sweep(self) -> list[str]:
        """Kill every remembered descendant still alive; returns what was found alive."""
        alive: list[str] = []
        for process in self._seen.values():
            with contextlib.suppress(psutil.Error):
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"{process.pid} {' '.join(process.cmdline())[:160]}")
                    process.kill()
        return alive

    def log_tails(self, lines: int = 15) -> str:
        parts = []
        for proc in self.group.processes:
            tail = proc.stderr_tail(lines)
            if tail:
                parts.append(f"--- {proc.name} (pid {proc.pid}, exit {proc.returncode}) stderr:\n{tail}")
        return "\n".join(parts)

    # --- the backend's API -----------------------------------------------------------------------------------------

    async def _checked(self, response: httpx.Response, *expected: int) -> Any:
        if response.status_code not in expected:
            raise ClusterError(
                f"{response.request.method} {response.request.url}: HTTP {response.status_code} {response.text[:500]}"
            )
        return response.json() if response.content else None

    async def register(self, backend: str, alias: str, agent_url: str, *, green: bool) -> str:
        """Register an agent (no launcher) once per URL; returns its agent id."""
        if agent_url in self._agent_ids:
            return self._agent_ids[agent_url]
        body: dict[str, Any] = {"alias": alias, "agent_url": agent_url, "launcher_url": "", "is_green": green}
        if green:
            body |= {"participant_requirements": WHITE_REQUIREMENT, "battle_timeout": 3600}
        answer = await self._checked(await self.http.post(f"{backend}/agents", json=body), 201)
        self._agent_ids[agent_url] = str(answer["agent_id"])
        return self._agent_ids[agent_url]

    async def start_battle(
        self, green: Green, white_url: str, pass_k_config: Mapping[str, Any], *, backend: str | None = None
    ) -> str:
        """Create a battle of ``green`` against the white agent at ``white_url`` through ``backend`` (default the
        green agent's pool backend, else the first replica): the battle's reports go to that backend."""
        backend = backend or green.pool_backend or self.backends[0]
        green_id = await self.register(backend, f"green-{green.name}", green.url, green=True)
        white_id = await self.register(backend, f"white-{len(self._agent_ids)}", white_url, green=False)
        body = {
            "green_agent_id": green_id,
            "opponents": [{"name": "white_agent", "agent_id": white_id}],
            "config": {"pass_k_config": dict(pass_k_config)},
        }
        created = await self._checked(await self.http.post(f"{backend}/battles", json=body), 201)
        return str(created["battle_id"])

    async def battle(self, battle_id: str, backend: str | None = None) -> dict[str, Any]:
        answer = await self.http.get(f"{backend or self.backends[-1]}/battles/{battle_id}")
        battle: dict[str, Any] = await self._checked(answer, 200)
        return battle

    async def attempts(self, battle_id: str, backend: str | None = None) -> list[AttemptOut]:
        """Every attempt the store holds for the battle (read with the pool key, in pages)."""
        out: list[AttemptOut] = []
        async with AttemptLeaseClient(backend or self.backends[-1], POOL, self.key, outage_s=60) as client:
            offset: int | None = 0
            while offset is not None:
                page = await client.read(battle_id, offset=offset, limit=50)
                out.extend(page.attempts)
                offset = page.next_offset
        return out

    # --- waiting ---------------------------------------------------------------------------------------------------

    async def wait_for(
        self, what: str, probe: Callable[[], Awaitable[T | None]], *, limit_s: float, every_s: float = 1.0
    ) -> T:
        """Poll ``probe`` until it returns something other than None; fail naming ``what`` (with the logs' tails)
        after ``limit_s``, or as soon as a process that was not killed on purpose exits."""
        deadline = time.monotonic() + limit_s
        last_error = ""
        while True:
            self.remember_descendants()
            for proc in self.group.processes:
                killed = any(g.proc is proc and g.killed for g in self.greens.values())
                if not killed and proc.returncode is not None:
                    raise ClusterError(
                        f"{proc.name} exited ({proc.returncode}) while waiting for {what}:\n{self.log_tails()}"
                    )
            try:
                found = await probe()
            except (httpx.HTTPError, AttemptLeaseError, ClusterError) as error:  # not published yet, a busy replica
                found, last_error = None, str(error)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"gave up after {limit_s:.0f} s waiting for {what}"
                    + (f" (last error: {last_error})" if last_error else "")
                    + f":\n{self.log_tails()}"
                )
            await asyncio.sleep(every_s)

    async def wait_finished(self, battle_id: str, *, limit_s: float, backend: str | None = None) -> dict[str, Any]:
        """The battle once the backend has its result (state finished; error fails naming it)."""

        async def probe() -> dict[str, Any] | None:
            battle = await self.battle(battle_id, backend)
            if battle["state"] == "error":
                raise BattleFailed(f"battle {battle_id} ended in error: {str(battle)[-2000:]}\n{self.log_tails()}")
            return battle if battle["state"] == "finished" and battle.get("result") else None

        return await self.wait_for(f"battle {battle_id} to finish", probe, limit_s=limit_s, every_s=0.5)


@contextlib.asynccontextmanager
async def pool_cluster(root: Path, *, key: str | None = None) -> AsyncIterator[PoolCluster]:
    """A :class:`PoolCluster` whose processes are all stopped (and their leftovers killed) when the block ends."""
    key = key or secrets.token_urlsafe(24)
    key_file = root / "pool.key"
    key_file.write_text(key + "\n", encoding="utf-8")
    key_file.chmod(0o600)
    async with (
        ProcessGroup(root / "logs", handle_signals=False) as group,
        httpx.AsyncClient(trust_env=False, timeout=60) as http,
    ):
        cluster = PoolCluster(root, group, http, key, key_file)
        try:
            yield cluster
        finally:
            cluster.remember_descendants()
            await group.stop_all()
            cluster.sweep()
