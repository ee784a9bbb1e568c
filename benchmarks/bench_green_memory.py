"""Memory of a green agent (a pool member): what docs/deploy.md sizes the workers' memory requests from.

Two figures, in unique set size (USS: pages only that process holds, so shared copy-on-write pages of the fork server
are not counted once per process):

1. an idle ``arena-green`` (its process tree: the server, the tool sandboxes' fork server, the scoring workers) after
   it has warmed up;
2. per tool sandbox: ``--sandboxes`` retail sandboxes opened at once with one tool call each, their USS averaged.

    .venv/bin/python benchmarks/bench_green_memory.py
    .venv/bin/python benchmarks/bench_green_memory.py --sandboxes 64 --warm-s 30

Processes started here are stopped here.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from green_agent.engine.tau.environment import AttemptEnvironment  # noqa: E402
from green_agent.engine.tau.sandbox import SandboxFactory  # noqa: E402
from green_agent.engine.tau.tasks import resolve_task  # noqa: E402
from launcher.ports import free_port  # noqa: E402

MIB = 2**20


def idle_green_uss(warm_s: float) -> tuple[float, int]:
    """USS (MiB) of an idle arena-green's process tree after ``warm_s`` seconds of warm-up, and its process count."""
    port = free_port()
    green = str(Path(sys.executable).with_name("arena-green"))
    with tempfile.TemporaryDirectory() as runs:
        process = subprocess.Popen(
            [green, "--host", "127.0.0.1", "--port", str(port), "--runs-dir", runs],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or process.poll() is not None:
                        raise SystemExit("arena-green did not start") from None
                    time.sleep(0.1)
            time.sleep(warm_s)
            root = psutil.Process(process.pid)
            tree = [root, *root.children(recursive=True)]
            return sum(p.memory_full_info().uss for p in tree) / MIB, len(tree)
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def sandbox_uss(count: int) -> float:
    """Mean USS (MiB) of ``count`` retail sandboxes open at once, each after one tool call."""
    async with SandboxFactory() as sandboxes:
        envs = [
            await AttemptEnvironment.create(resolve_task("retail", "test", i % 20), sandboxes=sandboxes)
            for i in range(count)
        ]
        try:
            for env in envs:
                await env.call_tool("get_user_details", {"user_id": "mia_garcia_4516"})
            pids = [env.sandbox_pid for env in envs if env.sandbox_pid is not None]
            return sum(psutil.Process(pid).memory_full_info().uss for pid in pids) / len(pids) / MIB
        finally:
            for env in envs:
                await env.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sandboxes", type=int, default=16, help="sandboxes open at once (default 16)")
    parser.add_argument("--warm-s", type=float, default=20.0, help="warm-up before measuring the idle agent")
    args = parser.parse_args()
    idle, processes = idle_green_uss(args.warm_s)
    per_sandbox = asyncio.run(sandbox_uss(args.sandboxes))
    print(f"idle arena-green: {idle:.0f} MiB USS over {processes} processes")
    print(f"per sandbox ({args.sandboxes} open, one tool call each): {per_sandbox:.1f} MiB USS")
    print(f"a member at capacity {args.sandboxes}: ~{idle + args.sandboxes * per_sandbox:.0f} MiB")


if __name__ == "__main__":
    main()
