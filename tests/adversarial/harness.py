"""The adversarial tests' harness: the real green agent as a subprocess, the operator's client, measurements.

* :class:`GreenAgent` -- ``python -m green_agent --port P --runs-dir DIR --operator-token T --log-level warning`` in a
  session of its own on a free loopback port, ready when ``GET /health`` answers 200 with status "ok"; stopping it
  (SIGTERM to the process group, then SIGKILL to the group and to every descendant ever seen) leaves nothing
  running. Its output goes to a log file whose tail is shown when it fails to start.
* :class:`ReferenceWhite` -- ``python -m white_agent --kind replay`` the same way (well-behaved control battles).
* :func:`run_battle` -- one assessment request as the operator sends it (Authorization: Bearer <token>), over raw A2A
  0.3 JSON-RPC ``message/stream`` with SSE, so that refusals (HTTP 401, a JSON-RPC error, a failed task) are seen
  exactly as sent; the result comes from the "Result" artifact and from ``DIR/<battle_id>/summary.json``.
* :class:`McpSession` -- a raw MCP (streamable HTTP) session on ``/mcp/`` with or without the token.
* :class:`HealthPoller` / :class:`RssSampler` -- /health latency (p50/p99/max) and peak RSS of a process tree.

Nothing here imports ``green_agent`` (it runs in the subprocess), so the harness works whatever state the green
agent's source is in; ``ARENA_ADVERSARIAL_GREEN_SOURCE`` points the subprocess at another source tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx
import psutil

REPO = Path(__file__).resolve().parents[2]
_VENV_PYTHON = REPO / ".venv" / "bin" / "python"
PYTHON = str(_VENV_PYTHON) if _VENV_PYTHON.exists() else sys.executable
GREEN_SOURCE_ENV = "ARENA_ADVERSARIAL_GREEN_SOURCE"
TOKEN_ENV = "ARENA_OPERATOR_TOKEN"

TERMINAL_STATES = frozenset({"completed", "failed", "canceled", "rejected"})
INTERRUPTED_STATES = frozenset({"input-required", "auth-required", "input_required", "auth_required"})
INFRA_CATEGORIES = frozenset({"user_simulator_error", "harness_error"})
INFRA_AUTHORS = frozenset({"user_simulator", "environment", "harness"})


# ---------------------------------------------------------------------------------------------------------- processes


def free_port() -> int:
    """A loopback port nothing listens on right now (the caller retries if another process takes it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def descendants(pid: int) -> list[psutil.Process]:
    """Every live descendant of ``pid`` (recursively); [] when it is gone."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def alive(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The processes of ``processes`` still running (zombies count as gone: they hold no resources but a slot)."""
    left = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process)
        except psutil.NoSuchProcess:
            continue
    return left


def describe(processes: Iterable[psutil.Process]) -> list[str]:
    out = []
    for process in processes:
        try:
            out.append(f"{process.pid} ppid={process.ppid()} {' '.join(process.cmdline())[:160]}")
        except psutil.Error:
            out.append(f"{process.pid} (gone)")
    return out


def kill_all(processes: Iterable[psutil.Process]) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()


def wait_all_gone(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait up to ``timeout_s`` for ``processes`` to end; return those still running."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = alive(processes)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-limit:]
    except OSError:
        return "(no log)"


@functools.cache
def green_help_text() -> str:
    """``python -m green_agent --help`` (cached): which flags this green agent accepts."""
    done = subprocess.run(
        [PYTHON, "-m", "green_agent", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=green_source_dir(),
        env=_child_env({}),
        check=False,
    )
    return done.stdout + done.stderr


def green_accepts_token_flag() -> bool:
    return "--operator-token" in green_help_text()


def green_source_dir() -> Path:
    configured = os.environ.get(GREEN_SOURCE_ENV)
    return Path(configured).resolve() if configured else REPO


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env.pop(name, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.pop(TOKEN_ENV, None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(green_source_dir()), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class ManagedProcess:
    """A child in a session of its own, stopped with its whole tree."""

    name = "process"

    def __init__(self, argv: list[str], *, log_path: Path, env: dict[str, str], cwd: Path) -> None:
        self.argv = argv
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        self.pid = self.popen.pid
        self.process = psutil.Process(self.pid)
        self._seen: dict[int, psutil.Process] = {}
        self.stopped = False

    def remember_descendants(self) -> list[psutil.Process]:
        """Note the current descendants (so stop() can kill them even after their parent died); return them."""
        found = descendants(self.pid)
        for child in found:
            self._seen.setdefault(child.pid, child)
        return found

    @property
    def seen_descendants(self) -> list[psutil.Process]:
        return list(self._seen.values())

    def running(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, limit: int = 4000) -> str:
        with contextlib.suppress(Exception):
            self._log.flush()
        return _tail(self.log_path, limit)

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the process group, wait ``grace_s``, then SIGKILL the group and every descendant ever seen."""
        if self.stopped:
            return
        self.stopped = True
        self.remember_descendants()
        tree = [self.process, *self.seen_descendants]
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=grace_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        kill_all(alive(tree))
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        left = wait_all_gone(tree, 10)
        kill_all(left)
        self._log.close()


def _wait_ready(proc: ManagedProcess, url: str, *, timeout_s: float, ready: Callable[[httpx.Response], bool]) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0, trust_env=False) as http:
        while True:
            if not proc.running():
                raise RuntimeError(
                    f"{proc.name} exited with code {proc.popen.returncode} before it was ready "
                    f"({' '.join(proc.argv)}):\n{proc.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                response = http.get(url)
                if ready(response):
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{proc.name} was not ready at {url} within {timeout_s:g} s:\n{proc.log_tail()}")
            time.sleep(0.1)


def _health_ok(response: httpx.Response) -> bool:
    if response.status_code != 200:
        return False
    with contextlib.suppress(ValueError):
        body = response.json()
        return not isinstance(body, dict) or body.get("status", "ok") == "ok"
    return True


class GreenAgent(ManagedProcess):
    """The green agent under test, as a subprocess on 127.0.0.1:<free port>."""

    name = "green agent"

    def __init__(
        self,
        *,
        port: int,
        runs_dir: Path,
        token: str,
        log_path: Path,
        extra_args: Iterable[str] = (),
        token_via_flag: bool | None = None,
    ) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.runs_dir = runs_dir
        self.token = token
        self.token_via_flag = green_accepts_token_flag() if token_via_flag is None else token_via_flag
        argv = [
            PYTHON,
            "-m",
            "green_agent",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--runs-dir",
            str(runs_dir),
            "--log-level",
            "warning",
        ]
        env_extra: dict[str, str] = {}
        if self.token_via_flag:
            argv += ["--operator-token", token]
        else:  # this green agent has no such flag (yet): the environment variable is the other documented way
            env_extra[TOKEN_ENV] = token
        argv += list(extra_args)
        super().__init__(argv, log_path=log_path, env=_child_env(env_extra), cwd=green_source_dir())

    @classmethod
    def start(
        cls,
        *,
        runs_dir: Path,
        token: str,
        log_dir: Path,
        extra_args: Iterable[str] = (),
        startup_timeout_s: float = 180.0,
        attempts: int = 3,
    ) -> GreenAgent:
        """Start one and wait for /health; retries on another port when the chosen one was taken meanwhile."""
        runs_dir.mkdir(parents=True, exist_ok=True)
        last: Exception | None = None
        for attempt in range(attempts):
            port = free_port()
            green = cls(
                port=port,
                runs_dir=runs_dir,
                token=token,
                extra_args=extra_args,
                log_path=log_dir / f"green-{port}-{uuid.uuid4().hex[:6]}.log",
            )
            try:
                _wait_ready(green, green.url + "/health", timeout_s=startup_timeout_s, ready=_health_ok)
            except RuntimeError as error:
                green.stop(grace_s=2)
                last = error
                if "address already in use" not in green.log_tail().lower() or attempt == attempts - 1:
                    raise
                continue
            green.remember_descendants()
            return green
        raise RuntimeError(f"could not start the green agent: {last}")

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def healthy(self, timeout_s: float = 2.0) -> bool:
        if not self.running():
            return False
        try:
            with httpx.Client(timeout=timeout_s, trust_env=False) as http:
                return _health_ok(http.get(self.url + "/health"))
        except httpx.HTTPError:
            return False

    def health_json(self, timeout_s: float = 2.0) -> dict[str, Any] | None:
        try:
            with httpx.Client(timeout=timeout_s, trust_env=False) as http:
                response = http.get(self.url + "/health")
            return response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def run_dir(self, battle_id: str) -> Path:
        return self.runs_dir / battle_id

    def tree_rss(self) -> int:
        """RSS of the green agent and its descendants (bytes)."""
        total = 0
        for process in [self.process, *descendants(self.pid)]:
            with contextlib.suppress(psutil.Error):
                total += process.memory_info().rss
        return total

    def main_rss(self) -> int:
        try:
            return int(self.process.memory_info().rss)
        except psutil.Error:
            return 0


class ReferenceWhite(ManagedProcess):
    """The repo's reference white agent (``python -m white_agent --kind KIND``) as a subprocess."""

    name = "reference white agent"

    def __init__(self, *, kind: str, port: int, log_path: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        argv = [
            PYTHON,
            "-m",
            "white_agent",
            "--kind",
            kind,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
        super().__init__(argv, log_path=log_path, env=_child_env({}), cwd=REPO)

    @classmethod
    def start(cls, *, kind: str, log_dir: Path, timeout_s: float = 60.0) -> ReferenceWhite:
        port = free_port()
        white = cls(kind=kind, port=port, log_path=log_dir / f"white-{kind}-{port}.log")
        try:
            _wait_ready(
                white,
                white.url + "/.well-known/agent-card.json",
                timeout_s=timeout_s,
                ready=lambda r: r.status_code == 200,
            )
        except RuntimeError:
            white.stop(grace_s=2)
            raise
        return white


# ---------------------------------------------------------------------------------------------------------- client


@dataclass
class BattleOutcome:
    """How one assessment request ended, as the operator saw it."""

    battle_id: str
    state: str
    """Final A2A task state ("completed", "failed", "canceled", "rejected"), "message" for a Message answer,
    "http_<status>" for an HTTP error answer, "jsonrpc_error" for a JSON-RPC error."""
    http_status: int
    error: str | None = None
    task_id: str | None = None
    result: dict[str, Any] | None = None
    """The "Result" artifact's data part (the BattleResult)."""
    summary: dict[str, Any] | None = None
    """``runs/<battle_id>/summary.json`` when it exists."""
    events: list[dict[str, Any]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    raw_error: Any = None
    elapsed_s: float = 0.0

    @property
    def battle_started(self) -> bool:
        return any(e.get("type") == "battle_started" for e in self.events)

    @property
    def refused(self) -> bool:
        """Refused before any battle started: an HTTP/JSON-RPC error, or a failed/rejected task with no battle."""
        if self.state.startswith("http_") or self.state == "jsonrpc_error":
            return True
        return self.state in ("failed", "rejected") and not self.battle_started

    @property
    def attempts(self) -> list[dict[str, Any]]:
        source = self.summary or self.result or {}
        return list(source.get("attempts") or [])

    def describe(self) -> str:
        text = f"state={self.state} http={self.http_status} task={self.task_id} error={self.error!r}"
        if self.texts:
            text += f" last status text={self.texts[-1][:300]!r}"
        return text


def new_battle_id(prefix: str = "adv") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def assessment_text(white_url: str, config: dict[str, Any], battle_id: str | None, **extra: Any) -> str:
    payload: dict[str, Any] = {"participants": {"white_agent": white_url}, "config": config}
    if battle_id is not None:
        payload["battle_id"] = battle_id
    payload.update(extra)
    return json.dumps(payload)


def user_message(text: str) -> dict[str, Any]:
    return {"kind": "message", "role": "user", "messageId": uuid.uuid4().hex, "parts": [{"kind": "text", "text": text}]}


def _parts_text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict) and "text" in p)


def _parts_data(parts: Any) -> list[Any]:
    if not isinstance(parts, list):
        return []
    return [
        p.get("data")
        for p in parts
        if isinstance(p, dict) and (p.get("kind") == "data" or ("data" in p and "text" not in p))
    ]


def _state_of(status: Any) -> str:
    if not isinstance(status, dict):
        return "unknown"
    state = str(status.get("state", "unknown")).lower()
    return state.removeprefix("task_state_").replace("_", "-")


async def run_battle(
    green: GreenAgent,
    white_url: str,
    config: dict[str, Any],
    *,
    battle_id: str | None = None,
    token: str | bool | None = True,
    timeout_s: float = 180.0,
    on_task_id: Callable[[str], None] | None = None,
    extra_fields: dict[str, Any] | None = None,
    text: str | None = None,
    watch_health: bool = True,
    unresponsive_s: float = 15.0,
) -> BattleOutcome:
    """Send one assessment request and follow it to its end (raw A2A 0.3 ``message/stream`` + SSE).

    ``token``: True = the green agent's operator token, a str = that token, None/False = no Authorization header.
    ``battle_id``: default a fresh valid id (``text`` replaces the whole request text, for malformed requests).
    With ``watch_health`` the green agent's /health is polled meanwhile: when it stops answering for
    ``unresponsive_s`` (a blocked event loop) the call fails at once instead of waiting for ``timeout_s``.
    Raises AssertionError (with the green agent's log tail) on a hang, a broken stream or an unresponsive agent.
    """
    battle_id = new_battle_id() if battle_id is None and text is None else battle_id
    headers = {"Accept": "text/event-stream"}
    bearer = green.token if token is True else (token or None)
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    body_text = text if text is not None else assessment_text(white_url, config, battle_id, **(extra_fields or {}))
    request = {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": "message/stream",
        "params": {"message": user_message(body_text)},
    }
    outcome = BattleOutcome(battle_id=battle_id or "", state="submitted", http_status=0)
    started = time.monotonic()

    async def follow() -> None:
        timeout = httpx.Timeout(connect=10.0, read=None, write=30.0, pool=30.0)
        async with (
            httpx.AsyncClient(timeout=timeout, trust_env=False) as http,
            http.stream("POST", green.url + "/", json=request, headers=headers) as response,
        ):
            outcome.http_status = response.status_code
            content_type = response.headers.get("content-type", "")
            if response.status_code != 200:
                raw = (await response.aread()).decode("utf-8", "replace")
                outcome.state = f"http_{response.status_code}"
                outcome.error = raw[:2000]
                return
            if "text/event-stream" not in content_type:
                _apply_payload(outcome, _json_or_text(await response.aread()), on_task_id)
                return
            data_lines: list[str] = []
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    data_lines.append(line[5:].lstrip())
                    continue
                if line.strip() == "" and data_lines:
                    payload = _json_or_text("\n".join(data_lines).encode())
                    data_lines = []
                    if _apply_payload(outcome, payload, on_task_id):
                        return
            if data_lines:
                _apply_payload(outcome, _json_or_text("\n".join(data_lines).encode()), on_task_id)

    async def watchdog() -> None:
        silent_since: float | None = None
        async with httpx.AsyncClient(timeout=httpx.Timeout(2.0), trust_env=False) as http:
            while True:
                await asyncio.sleep(0.5)
                if not green.running():
                    raise AssertionError(
                        f"the green agent died during the battle (exit code "
                        f"{green.popen.returncode}):\n{green.log_tail()}"
                    )
                try:
                    ok = (await http.get(green.url + "/health")).status_code == 200
                except httpx.HTTPError:
                    ok = False
                now = time.monotonic()
                if ok:
                    silent_since = None
                elif silent_since is None:
                    silent_since = now
                elif now - silent_since > unresponsive_s:
                    raise AssertionError(
                        f"the green agent stopped answering GET /health for {unresponsive_s:g} s during the battle "
                        f"(its event loop is blocked); state so far: {outcome.describe()}"
                    )

    follower = asyncio.create_task(follow())
    guard = asyncio.create_task(watchdog()) if watch_health else None
    try:
        waiting = {follower} | ({guard} if guard else set())
        done, _ = await asyncio.wait(waiting, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if guard is not None and guard in done:
            guard.result()  # raises the watchdog's AssertionError
        if follower not in done:
            raise AssertionError(
                f"the assessment did not end within {timeout_s:g} s ({outcome.describe()}; "
                f"{len(outcome.events)} events)\ngreen agent log:\n{green.log_tail(2000)}"
            )
        try:
            follower.result()
        except httpx.HTTPError as error:
            raise AssertionError(
                f"the connection to the green agent broke: {type(error).__name__}: {error} "
                f"({outcome.describe()})\ngreen agent log:\n{green.log_tail(2000)}"
            ) from error
    finally:
        for task in (follower, guard):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
    outcome.elapsed_s = time.monotonic() - started
    if not outcome.battle_id:
        started_events = [e for e in outcome.events if e.get("type") == "battle_started"]
        outcome.battle_id = str(
            (outcome.result or {}).get("battle_id")
            or (started_events[0].get("battle_id") if started_events else "")
            or ""
        )
    if outcome.battle_id:
        with contextlib.suppress(ValueError, OSError):  # e.g. ENAMETOOLONG for an overlong id
            summary_path = _safe_child(green.runs_dir, outcome.battle_id) / "summary.json"
            if summary_path.is_file():
                outcome.summary = json.loads(summary_path.read_text(encoding="utf-8"))
    return outcome


def _safe_child(root: Path, name: str) -> Path:
    """``root/name`` when that stays inside root, else a path that does not exist (never look outside)."""
    candidate = (root / name).resolve()
    if candidate.parent == root.resolve():
        return candidate
    return root / "__outside__"


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def _apply_payload(outcome: BattleOutcome, payload: Any, on_task_id: Callable[[str], None] | None) -> bool:
    """Fold one JSON-RPC answer (or SSE event) into ``outcome``; True when the assessment is over."""
    if not isinstance(payload, dict):
        outcome.state = "invalid_answer"
        outcome.error = str(payload)[:2000]
        return True
    if payload.get("error") is not None:
        outcome.state = "jsonrpc_error"
        outcome.raw_error = payload["error"]
        error = payload["error"]
        outcome.error = json.dumps(error)[:2000] if not isinstance(error, str) else error
        return True
    result = payload.get("result")
    if not isinstance(result, dict):
        outcome.state = "invalid_answer"
        outcome.error = json.dumps(payload)[:2000]
        return True
    kind = result.get("kind")
    if kind == "message":
        outcome.state = "message"
        outcome.error = _parts_text(result.get("parts"))
        return True
    if kind == "task":
        task_id = result.get("id")
        if isinstance(task_id, str) and outcome.task_id is None:
            outcome.task_id = task_id
            if on_task_id is not None:
                on_task_id(task_id)
        for artifact in result.get("artifacts") or []:
            _apply_artifact(outcome, artifact)
        return _apply_status(outcome, result.get("status"), snapshot=True)
    if kind == "status-update":
        task_id = result.get("taskId")
        if isinstance(task_id, str) and outcome.task_id is None:
            outcome.task_id = task_id
            if on_task_id is not None:
                on_task_id(task_id)
        return _apply_status(outcome, result.get("status"), snapshot=False) or bool(
            result.get("final") and outcome.state in TERMINAL_STATES | INTERRUPTED_STATES
        )
    if kind == "artifact-update":
        _apply_artifact(outcome, result.get("artifact"))
        return False
    outcome.state = "invalid_answer"
    outcome.error = json.dumps(payload)[:2000]
    return True


def _apply_status(outcome: BattleOutcome, status: Any, *, snapshot: bool) -> bool:
    state = _state_of(status)
    outcome.state = state
    message = status.get("message") if isinstance(status, dict) else None
    if isinstance(message, dict):
        text = _parts_text(message.get("parts"))
        if text:
            outcome.texts.append(text)
        if not snapshot or state in TERMINAL_STATES:
            for data in _parts_data(message.get("parts")):
                if isinstance(data, dict) and isinstance(data.get("arena_event"), dict):
                    outcome.events.append(data["arena_event"])
        if state in TERMINAL_STATES and state != "completed":
            outcome.error = text or outcome.error
    return state in TERMINAL_STATES or state in INTERRUPTED_STATES


def _apply_artifact(outcome: BattleOutcome, artifact: Any) -> None:
    if not isinstance(artifact, dict) or artifact.get("name") != "Result":
        return
    for data in _parts_data(artifact.get("parts")):
        if isinstance(data, dict) and "attempts" in data:
            outcome.result = data


async def jsonrpc(
    green: GreenAgent,
    method: str,
    params: dict[str, Any],
    *,
    token: str | bool | None = None,
    version: str | None = None,
    timeout_s: float = 10.0,
) -> tuple[int, Any]:
    """One raw JSON-RPC call to the green agent's A2A endpoint; (HTTP status, parsed body or text)."""
    headers: dict[str, str] = {}
    bearer = green.token if token is True else (token or None)
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    if version:
        headers["A2A-Version"] = version
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), trust_env=False) as http:
        response = await http.post(
            green.url + "/",
            headers=headers,
            json={"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params},
        )
    return response.status_code, _json_or_text(response.content)


def rpc_refused(status: int, body: Any) -> bool:
    """HTTP 401/403 (or any error status), a JSON-RPC error, or a task the green agent failed/rejected."""
    if status >= 400:
        return True
    if not isinstance(body, dict):
        return False
    if body.get("error") is not None:
        return True
    result = body.get("result")
    if isinstance(result, dict) and result.get("kind") == "task":
        return _state_of(result.get("status")) in ("failed", "rejected")
    return False


class McpSession:
    """A raw MCP streamable-HTTP session on the green agent's control endpoint (``/mcp/``)."""

    PROTOCOL = "2025-06-18"
    ACCEPT = "application/json, text/event-stream"

    def __init__(self, green: GreenAgent, *, token: str | bool | None = True, timeout_s: float = 15.0) -> None:
        self.url = green.url + "/mcp/"
        bearer = green.token if token is True else (token or None)
        self.headers = {"Accept": self.ACCEPT, "MCP-Protocol-Version": self.PROTOCOL}
        if bearer:
            self.headers["Authorization"] = f"Bearer {bearer}"
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), trust_env=False)
        self.session_id: str | None = None
        self._ids = 0

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def post(self, method: str, params: dict[str, Any] | None = None, *, notify: bool = False) -> tuple[int, Any]:
        self._ids += 1
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        if not notify:
            body["id"] = self._ids
        headers = dict(self.headers)
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        response = await self.http.post(self.url, headers=headers, json=body)
        if response.headers.get("mcp-session-id"):
            self.session_id = response.headers["mcp-session-id"]
        text = response.text
        if "text/event-stream" in response.headers.get("content-type", ""):
            payloads = [
                _json_or_text(line[5:].strip().encode()) for line in text.splitlines() if line.startswith("data:")
            ]
            answers = [p for p in payloads if isinstance(p, dict) and ("result" in p or "error" in p)]
            return response.status_code, answers[-1] if answers else (payloads[-1] if payloads else text)
        return response.status_code, _json_or_text(response.content)

    async def initialize(self) -> tuple[int, Any]:
        status, body = await self.post(
            "initialize",
            {
                "protocolVersion": self.PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "adversarial-tests", "version": "1"},
            },
        )
        if status == 200:
            await self.post("notifications/initialized", notify=True)
        return status, body

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> tuple[int, Any]:
        return await self.post("tools/call", {"name": name, "arguments": arguments})


def tool_structured(body: Any) -> dict[str, Any]:
    """The structured content of a successful MCP tool result (AssertionError with the body otherwise)."""
    assert isinstance(body, dict) and isinstance(body.get("result"), dict), body
    result = body["result"]
    assert not result.get("isError"), result
    structured = result.get("structuredContent")
    if structured is None:
        content = result.get("content") or []
        texts = [c.get("text") for c in content if isinstance(c, dict) and c.get("type") == "text"]
        structured = json.loads(str(texts[0])) if texts else {}
    return dict(structured)


# ---------------------------------------------------------------------------------------------------------- measures


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


class HealthPoller:
    """Polls ``GET /health`` every ``interval_s`` and records each latency in ms (a failed or timed-out request
    counts as ``timeout_s``). Use as ``async with HealthPoller(green) as poll: ...``; figures in ``summary()``."""

    def __init__(self, green: GreenAgent, *, interval_s: float = 0.02, timeout_s: float = 2.0) -> None:
        self.green = green
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.latencies_ms: list[float] = []
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s), trust_env=False, limits=limits) as http:
            while True:
                started = time.perf_counter()
                try:
                    ok = (await http.get(self.green.url + "/health")).status_code == 200
                except httpx.HTTPError:
                    ok = False
                elapsed = (time.perf_counter() - started) * 1000
                if not ok:
                    self.failures += 1
                    elapsed = max(elapsed, self.timeout_s * 1000)
                self.latencies_ms.append(elapsed)
                await asyncio.sleep(max(0.0, self.interval_s - (time.perf_counter() - started)))

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def p99(self) -> float:
        return percentile(self.latencies_ms, 99)

    def summary(self) -> str:
        values = self.latencies_ms
        if not values:
            return "no /health samples"
        return (
            f"/health: {len(values)} samples, p50 {percentile(values, 50):.1f} ms, p99 {self.p99:.1f} ms, "
            f"max {max(values):.1f} ms, failures {self.failures}"
        )


class RssSampler:
    """Samples the RSS of the green agent's main process and of its whole tree every ``interval_s`` in a thread.

    ``peak_main`` / ``peak_tree`` in bytes. ``kill_above``: a safety valve -- when the main process's RSS exceeds it,
    the green agent is SIGKILLed at once (the test has failed anyway; this keeps an unbounded reader from taking the
    machine down) and ``killed`` is set.
    """

    def __init__(self, green: GreenAgent, *, interval_s: float = 0.05, kill_above: int | None = None) -> None:
        self.green = green
        self.interval_s = interval_s
        self.kill_above = kill_above
        self.samples: list[tuple[float, int, int]] = []
        self.peak_main = 0
        self.peak_tree = 0
        self.killed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            main, tree = self.green.main_rss(), self.green.tree_rss()
            self.samples.append((time.monotonic() - started, main, tree))
            self.peak_main = max(self.peak_main, main)
            self.peak_tree = max(self.peak_tree, tree)
            if self.kill_above is not None and main > self.kill_above and not self.killed:
                self.killed = True
                self.green.remember_descendants()
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.green.pid, signal.SIGKILL)
                kill_all(alive(self.green.seen_descendants))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


MB = 1024 * 1024


# ---------------------------------------------------------------------------------------------------------- checks


def assert_completed(outcome: BattleOutcome, green: GreenAgent, *, attempts: int | None = None) -> list[dict[str, Any]]:
    """The battle completed: the task ended "completed", a result came back, summary.json exists with status
    completed, and (optionally) it holds ``attempts`` attempts. Returns the attempts."""
    assert outcome.state == "completed", (
        f"the battle did not complete: {outcome.describe()}\ngreen agent log:\n{green.log_tail(3000)}"
    )
    assert outcome.result is not None, f"no Result artifact with a BattleResult: {outcome.describe()}"
    assert outcome.summary is not None, f"no {green.runs_dir}/{outcome.battle_id}/summary.json"
    assert outcome.summary.get("status", "completed") == "completed", outcome.summary.get("status")
    found = outcome.attempts
    if attempts is not None:
        assert len(found) == attempts, f"expected {attempts} attempts, got {len(found)}"
    return found


def assert_no_infrastructure_errors(attempts: list[dict[str, Any]]) -> None:
    bad = [
        (a.get("task_key") or a.get("task_index"), a.get("attempt"), a.get("failure"))
        for a in attempts
        if a.get("outcome") == "infra_error"
        or (a.get("failure") or {}).get("category") in INFRA_CATEGORIES
        or (a.get("failure") or {}).get("fault_author") in INFRA_AUTHORS
    ]
    assert not bad, f"attempts blamed on the infrastructure (must be the agent's failures): {bad}"


def failure_of(attempt: dict[str, Any]) -> tuple[str | None, str | None, str]:
    failure = attempt.get("failure") or {}
    return failure.get("category"), failure.get("fault_author"), str(failure.get("detail") or "")


def trajectory_paths(green: GreenAgent, battle_id: str) -> list[Path]:
    return sorted((green.run_dir(battle_id) / "trajectories").glob("*.jsonl"))


def lone_surrogates_in(value: Any) -> int:
    """How many lone surrogate code points the decoded JSON value holds (in keys and strings)."""
    if isinstance(value, str):
        return sum(1 for ch in value if 0xD800 <= ord(ch) <= 0xDFFF)
    if isinstance(value, dict):
        return sum(lone_surrogates_in(k) + lone_surrogates_in(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(lone_surrogates_in(v) for v in value)
    return 0


def check_trajectory_file(path: Path) -> list[Any]:
    """The file is valid UTF-8, every line is JSON, and no decoded string holds a lone surrogate; returns the lines."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")  # strict: lone surrogates encoded as bytes (CESU) fail here too
    except UnicodeDecodeError as error:
        raise AssertionError(f"{path.name} is not valid UTF-8: {error}") from None
    lines = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as error:
            raise AssertionError(f"{path.name} line {number} is not JSON: {error}") from None
        count = lone_surrogates_in(value)
        assert count == 0, f"{path.name} line {number} decodes to {count} lone surrogate(s) (must be replaced)"
        lines.append(value)
    return lines


REPLY_LIMIT = re.compile(
    r"max_reply_bytes|1[,_ .]?048[,_ .]?576|\b1(\.0+)?\s*MiB\b|\b1024\s*KiB\b|\b1(\.0+)?\s*MB\b", re.IGNORECASE
)
"""A failure detail "mentions the reply limit": the field name, 1048576 (any grouping), 1 MiB, 1024 KiB or 1 MB."""
TOOL_LIMIT = re.compile(r"tool_timeout_s|\b5(\.0+)?\s*(s|sec|secs|seconds)\b", re.IGNORECASE)
"""A failure detail "names the tool time limit": the field name or 5 s (the default), next to the word "tool"."""


def mentions_reply_limit(detail: str) -> bool:
    return bool(REPLY_LIMIT.search(detail))


def mentions_tool_limit(detail: str) -> bool:
    return "tool" in detail.lower() and bool(TOOL_LIMIT.search(detail))
