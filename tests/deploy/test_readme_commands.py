"""The README's commands, run as written in a copy of the repository (issue 26: "every command works from a fresh
clone").

Every fenced ``bash``, ``console`` and ``python`` block of README.md carries a marker on the line above it,
``<!-- readme-check: NAME -->`` or ``<!-- readme-check: skip: REASON -->``; the commands are read from the README
itself, so the text and the check cannot drift: an unmarked runnable block, a marker without its check, or a check
without its marker fails :func:`test_every_runnable_block_is_marked`. Each NAME is one test case below (``-rs`` lists
the skipped blocks with their reasons), run in a copy of the checkout's tracked files with the existing ``.venv``
(symlinked), ``.venv/bin`` first on PATH (so ``arena`` and ``python`` in ``$`` lines are the venv's).

Substitutions, all of them here (nothing else differs from the README's text): the README's fixed ports (9000, 9004,
9006) become free ports; ``<battle id>`` becomes the demo run's id; the LLM block's key and base URL point at the
scripted OpenAI-compatible server (tests/support/fake_openai.py) on loopback; ``$BROWSER`` records what ``--open``
opens. Servers the README starts are stopped with SIGINT (its Ctrl-C), and killed if they do not stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fake_openai import fake_state, make_fake_openai, text_reply
from tests.support.servers import serve_app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RUNNABLE = frozenset({"bash", "console", "python"})
MARKER = re.compile(r"^\s*<!-- readme-check: (?P<spec>.+?) -->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
COMMAND_LIMIT_S = 600.0
READY_LIMIT_S = 180.0
STOPPED_BY_CTRL_C = (0, 130, -signal.SIGINT)
"""How a server the README leaves running may end on SIGINT: exit 0, exit 130, or killed by the re-raised signal
(uvicorn's way; a shell shows it as 130)."""
URL = re.compile(r"http://127\.0\.0\.1:\d+[^\s'\")]*")


@dataclass(frozen=True)
class Block:
    """One fenced block of the README with the marker above it ("" when there is none)."""

    spec: str
    lang: str
    body: str
    line: int

    @property
    def name(self) -> str:
        return "skip" if self.spec.startswith("skip:") else self.spec

    def commands(self) -> list[str]:
        """A console block's ``$`` lines, or a bash block's command lines (continuations joined, comment lines and
        blank lines left out)."""
        if self.lang == "console":
            return [line[2:].strip() for line in self.body.splitlines() if line.startswith("$ ")]
        joined = re.sub(r"\\\n\s*", "", self.body)
        return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block of ``text`` in a runnable language, with its marker."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if opened is None or not opened.group("lang"):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        if opened.group("lang") in RUNNABLE:
            indent = len(opened.group("indent"))
            marker = MARKER.match(lines[i - 1]) if i > 0 else None
            body = "\n".join(line[indent:] for line in lines[i + 1 : end])
            blocks.append(Block(marker.group("spec") if marker else "", opened.group("lang"), body, i + 1))
        i = end + 1
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Workspace:
    """The copy of the repository the commands run in, and what earlier checks left there."""

    root: Path
    env: dict[str, str]
    ports: dict[int, int] = field(default_factory=dict)
    base_run: str | None = None

    def port(self, readme_port: int) -> int:
        """The free port standing in for one of the README's fixed ports (the same one for the whole module)."""
        if readme_port not in self.ports:
            self.ports[readme_port] = free_port()
        return self.ports[readme_port]

    def local(self, command: str) -> str:
        """``command`` with the README's fixed ports replaced."""
        for readme_port in (9000, 9004, 9006):
            command = re.sub(rf"(?<=[:= ]){readme_port}\b", str(self.port(readme_port)), command)
        return command

    async def sh(self, command: str, *, env: dict[str, str] | None = None) -> tuple[int, str]:
        """Run ``command`` with bash in the copy; its exit code and its output (stdout and stderr together)."""
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=self.root,
            env={**self.env, **(env or {})},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), COMMAND_LIMIT_S)
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        return proc.returncode or 0, out.decode("utf-8", "replace")

    async def demo_run(self) -> str:
        """The id of an offline demo run (the first command's, or one made the same way)."""
        if self.base_run is None:
            code, out = await self.sh("arena run scenarios/offline_demo.toml")
            assert code == 0, out
            self.base_run = run_id(out)
        return self.base_run


def run_id(output: str) -> str:
    found = re.search(r"summary: runs/([^/\s]+)/summary\.json", output)
    assert found is not None, output
    return found.group(1)


@dataclass
class Running:
    """A command the README leaves running (a server), its output so far."""

    proc: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    async def wait_for(self, pattern: str, limit: float = READY_LIMIT_S) -> re.Match[str]:
        async with asyncio.timeout(limit):
            while True:
                found = re.search(pattern, self.text)
                if found is not None:
                    return found
                assert self.proc.returncode is None, f"exited {self.proc.returncode} before /{pattern}/:\n{self.text}"
                await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def running(ws: Workspace, command: str, *, env: dict[str, str] | None = None) -> AsyncIterator[Running]:
    """Start ``command`` (exec'd by bash, so signals reach it); on exit it gets SIGINT (Ctrl-C), then SIGKILL."""
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        f"exec {command}",
        cwd=ws.root,
        env={**ws.env, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    run = Running(proc)

    async def drain() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            run.lines.append(raw.decode("utf-8", "replace"))

    reader = asyncio.create_task(drain())
    try:
        yield run
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything it left behind in its session
        await reader


async def get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as client:
        return await client.get(url)


# ------------------------------------------------------------------------------------------------------ the checks


async def check_first_command(ws: Workspace, block: Block) -> None:
    # The install is what .ci/run does on a clean machine; here the venv exists: only its `arena run` part runs.
    (command,) = block.commands()
    run = command.split(" && ")[-1]
    assert run == ".venv/bin/arena run scenarios/offline_demo.toml", command
    code, out = await ws.sh(run)
    assert code == 0, out
    assert "verdict: completed (exit 0" in out, out
    ws.base_run = run_id(out)


async def check_view(ws: Workspace, block: Block) -> None:
    run = await ws.demo_run()
    commands = block.commands()
    assert len(commands) == 2 and "runs/<battle id>" in commands[0] and commands[1].split()[2] == "runs/", commands
    for command in commands:
        async with running(ws, command.replace("<battle id>", run)) as server:
            url = (await server.wait_for(URL.pattern)).group(0)
            page = await get(url)
            assert page.status_code == 200, (url, page.text[:500])
            assert run in page.text
        assert server.proc.returncode in STOPPED_BY_CTRL_C, server.text


async def check_resume(ws: Workspace, block: Block) -> None:
    stop, resume, again = block.commands()
    assert stop.startswith("arena run scenarios/offline_demo.toml --battle-id demo -q"), stop
    journal = ws.root / "runs" / "demo" / "attempts.jsonl"
    async with running(ws, stop.split("#")[0]) as first:
        async with asyncio.timeout(COMMAND_LIMIT_S):
            while not journal.exists() or len(journal.read_text(encoding="utf-8").splitlines()) < 6:
                assert first.proc.returncode is None, first.text
                await asyncio.sleep(0.05)
        first.proc.send_signal(signal.SIGTERM)  # "stopped with SIGTERM after 6 attempts"
        await asyncio.wait_for(first.proc.wait(), 120)
    assert first.proc.returncode == 128 + signal.SIGTERM, first.text
    assert "stopped by SIGTERM; all agents stopped" in first.text, first.text
    assert "resume with: arena run scenarios/offline_demo.toml --resume --battle-id demo" in first.text, first.text
    code, out = await ws.sh(resume.split("#")[0])
    assert code == 0 and "resuming battle demo:" in out, out
    code, out = await ws.sh(again)
    assert code == 0 and "battle demo already finished (20 attempts); nothing to resume" in out, out
    # "ends with exactly the numbers of an uninterrupted run"
    resumed = json.loads((ws.root / "runs" / "demo" / "summary.json").read_text(encoding="utf-8"))
    whole = json.loads((ws.root / "runs" / await ws.demo_run() / "summary.json").read_text(encoding="utf-8"))
    assert resumed["summary"] == whole["summary"]


async def check_compare(ws: Workspace, block: Block) -> None:
    (command,) = block.commands()
    run = ws.root / "runs" / await ws.demo_run()
    for name in ("cmpA", "cmpB"):  # the demo against itself: the command as written, on two runs of the demo
        shutil.copytree(run, ws.root / "runs" / name, dirs_exist_ok=True)
    code, out = await ws.sh(command)
    assert code == 0, out
    assert "verdict (pass^1): no significant difference" in out, out


async def check_export(ws: Workspace, block: Block) -> None:
    export, metrics = block.commands()
    shutil.copytree(ws.root / "runs" / await ws.demo_run(), ws.root / "runs" / "t2x", dirs_exist_ok=True)
    code, out = await ws.sh(export)
    assert code == 0 and "wrote t2x.tau2.json" in out, out
    code, out = await ws.sh(metrics)
    assert code == 0, out
    assert "Average reward: 0.55" in out and "k=4: 0.0" in out, out


def llm_script(request: dict[str, Any]) -> Any:
    """The LLM user says what it wants, then stops; the llm agent (it sends tools) answers in words."""
    if request.get("tools"):
        return text_reply("Let me look into that for you.")
    said = sum(1 for message in request["messages"] if message.get("role") == "assistant")
    return text_reply("Thanks, that is all. ###STOP###" if said > 1 else "I want to exchange an item.")


async def check_llm(ws: Workspace, block: Block) -> None:
    fake = make_fake_openai(llm_script)
    async with serve_app(fake) as url:
        script = block.body.replace("sk-...", "sk-readme-check-not-a-key")
        script = script.replace("https://api.openai.com/v1", f"{url}/v1")
        assert script != block.body
        code, out = await ws.sh(script)
    assert code == 0, out
    assert "verdict: completed (exit 0" in out, out
    requests = fake_state(fake).requests
    bodies = [r.body for r in requests if r.body is not None]
    assert any(body.get("tools") for body in bodies), "the llm white agent never called the endpoint"
    assert any(not body.get("tools") for body in bodies), "the LLM user never called the endpoint"


MCP_AGENTS = ("arena-white --kind replay --port 9004", "arena-green --port 9006")


async def check_mcp_python(ws: Workspace, block: Block) -> None:
    readme = README.read_text(encoding="utf-8")
    assert all(f"`{command}`" in readme for command in MCP_AGENTS), "the README no longer starts them this way"
    token = {"ARENA_OPERATOR_TOKEN": "readme-check-operator-token"}
    script = ws.root / "mcp_example.py"
    script.write_text(ws.local(block.body), encoding="utf-8")
    async with running(ws, ws.local(MCP_AGENTS[0]), env=token) as white:
        await white.wait_for(r"ready: http://127\.0\.0\.1:\d+")
        async with running(ws, ws.local(MCP_AGENTS[1]), env=token) as green:
            await green.wait_for(r"ready: http://127\.0\.0\.1:\d+")
            code, out = await ws.sh("python mcp_example.py", env=token)
    assert code == 0, out
    progress = re.findall(r"^\d+/8 .*$", out, flags=re.M)  # the progress callback's lines
    assert len([line for line in progress if "SUCCESS" in line]) == 8, out  # 8/8 with the replay agent
    assert "FAILED" not in out and "CALIBRATION" in out, out


async def check_evaluation(ws: Workspace, block: Block) -> None:
    (command,) = block.commands()
    code, out = await ws.sh(command)
    assert code == 0, out
    assert "results written to runs/evaluations/" in out, out


async def check_watch_live(ws: Workspace, block: Block) -> None:
    (command,) = block.commands()
    opened = ws.root / "opened-urls.txt"
    recorder = ws.root / "record-browser.sh"
    recorder.write_text(f'#!/bin/sh\necho "$@" >> {opened}\n', encoding="utf-8")
    recorder.chmod(0o755)
    async with running(ws, command, env={"BROWSER": str(recorder)}) as live:
        await live.wait_for(r"verdict: completed", COMMAND_LIMIT_S)
        url = (await live.wait_for(URL.pattern + r"/ui/battles/\S+")).group(0)
        page = await get(url)
        assert page.status_code == 200 and "Timeline" in page.text, page.text[:500]
        assert live.proc.returncode is None, "--keep-backend: the page is served until Ctrl-C"
    assert url in opened.read_text(encoding="utf-8")
    assert live.proc.returncode in STOPPED_BY_CTRL_C, live.text


async def check_backend(ws: Workspace, block: Block) -> None:
    serve, run = (ws.local(command) for command in block.commands())
    async with running(ws, serve) as backend:
        base = f"http://127.0.0.1:{ws.port(9000)}"
        async with asyncio.timeout(READY_LIMIT_S):
            while True:
                assert backend.proc.returncode is None, backend.text
                with contextlib.suppress(httpx.HTTPError):
                    if (await get(f"{base}/health")).status_code == 200:
                        break
                await asyncio.sleep(0.2)
        code, out = await ws.sh(run)
        assert code == 0 and "verdict: completed (exit 0" in out, out
        listing = await get(f"{base}/")
        assert listing.status_code == 200 and "/ui/battles/" in listing.text
    assert backend.proc.returncode in STOPPED_BY_CTRL_C, backend.text


CHECKS: dict[str, Callable[[Workspace, Block], Awaitable[None]]] = {
    "first-command": check_first_command,
    "view": check_view,
    "resume": check_resume,
    "compare": check_compare,
    "export": check_export,
    "llm": check_llm,
    "mcp-python": check_mcp_python,
    "score-conversations": check_evaluation,
    "score-traces": check_evaluation,
    "eval-csv": check_evaluation,
    "watch-live": check_watch_live,
    "backend": check_backend,
}


def test_every_runnable_block_is_marked() -> None:
    """Each bash/console/python block names its check (or why it is skipped), and each check has its block."""
    unmarked = [f"README.md:{b.line} ({b.lang})" for b in BLOCKS if not b.spec]
    assert unmarked == [], f"runnable blocks without a <!-- readme-check: ... --> marker: {unmarked}"
    names = [b.name for b in BLOCKS if b.name != "skip"]
    assert sorted(names) == sorted(CHECKS), (names, sorted(CHECKS))
    assert all(len(b.spec) > len("skip: ") + 10 for b in BLOCKS if b.name == "skip"), "a skip must say why"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """The tracked files of the checkout (as they are in the working tree) with its .venv, in a temporary folder."""
    root = tmp_path_factory.mktemp("readme") / "arena"
    tracked = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, tracked):
        source = ROOT / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    (root / ".venv").symlink_to(ROOT / ".venv")
    keep = {key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "ARENA_", "BROWSER"))}
    env = {**keep, "PATH": f"{root / '.venv' / 'bin'}:{os.environ.get('PATH', '')}", "COLUMNS": "80", "NO_COLOR": "1"}
    return Workspace(root=root, env=env)


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.name}-line{b.line}" for b in BLOCKS])
async def test_readme_block_works_as_written(block: Block, workspace: Workspace) -> None:
    if block.name == "skip":
        pytest.skip(f"README.md:{block.line}: {block.spec.removeprefix('skip:').strip()}")
    if block.name not in CHECKS:
        pytest.fail(f"README.md:{block.line}: no check named {block.name!r}")
    await CHECKS[block.name](workspace, block)
