"""Process supervision: start/wait/stop, early death, SIGKILL fallback, group cleanup, Ctrl-C and SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from launcher_test_helpers import PYTHON, REPO, http_server_argv, pid_alive, wait_gone, write_card_dir

from launcher.ports import free_port, free_ports, loopback_url
from launcher.processes import (
    ChildExitedError,
    ProcessGroup,
    StartupTimeoutError,
    start_process,
    stop_process,
    wait_until_ready,
)


def test_free_ports_are_distinct_and_bindable() -> None:
    import socket

    ports = free_ports(5)
    assert len(set(ports)) == 5
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


async def test_start_wait_stop(tmp_path: Path) -> None:
    port = free_port()
    url = loopback_url(port)
    proc = start_process("card", http_server_argv(write_card_dir(tmp_path / "www", url), port), log_dir=tmp_path)
    try:
        await wait_until_ready(proc, url + "/.well-known/agent-card.json", timeout_s=30)
        assert proc.running
    finally:
        await stop_process(proc, grace_s=5)
    assert not proc.running
    assert not pid_alive(proc.pid)
    assert (tmp_path / "card.stderr.log").exists()


async def test_child_dying_early_reports_exit_code_and_stderr(tmp_path: Path) -> None:
    argv = [PYTHON, "-c", "import sys; sys.stderr.write('boom: port taken\\n'); sys.exit(3)"]
    proc = start_process("doomed", argv, log_dir=tmp_path)
    with pytest.raises(ChildExitedError) as caught:
        await wait_until_ready(proc, loopback_url(free_port()), timeout_s=60)
    error = caught.value
    assert error.returncode == 3
    assert "exited with code 3" in str(error)
    assert "boom: port taken" in str(error)
    assert "doomed" in str(error)


async def test_startup_timeout_names_the_url(tmp_path: Path) -> None:
    proc = start_process("sleeper", [PYTHON, "-c", "import time; time.sleep(60)"], log_dir=tmp_path)
    url = loopback_url(free_port())
    try:
        with pytest.raises(StartupTimeoutError) as caught:
            await wait_until_ready(proc, url, timeout_s=0.5)
        assert url in str(caught.value)
    finally:
        await stop_process(proc, grace_s=2)
    assert not pid_alive(proc.pid)


async def test_sigterm_ignoring_child_is_killed_after_grace(tmp_path: Path) -> None:
    code = (
        "import signal, time, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(120)"
    )
    proc = start_process("stubborn", [PYTHON, "-c", code], log_dir=tmp_path)
    while "ready" not in proc.stdout_path.read_text():
        assert proc.running
        await asyncio.sleep(0.05)
    returncode = await stop_process(proc, grace_s=0.5)
    assert returncode == -signal.SIGKILL
    assert not pid_alive(proc.pid)


async def test_stop_reaches_grandchildren(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print(child.pid, flush=True)
        time.sleep(120)
        """
    )
    proc = start_process("parent", [PYTHON, "-c", code], log_dir=tmp_path)
    while not proc.stdout_path.read_text().strip():
        assert proc.running
        await asyncio.sleep(0.05)
    grandchild = int(proc.stdout_path.read_text().split()[0])
    assert pid_alive(grandchild)
    await stop_process(proc, grace_s=2)
    assert wait_gone([grandchild]) == []


async def test_group_stops_children_on_exception(tmp_path: Path) -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="kaboom"):
        async with ProcessGroup(tmp_path, grace_s=2) as group:
            for name in ("a", "b"):
                pids.append(group.start(name, [PYTHON, "-c", "import time; time.sleep(120)"]).pid)
            raise RuntimeError("kaboom")
    assert wait_gone(pids, timeout_s=5) == []


async def test_group_watch_raises_when_a_child_exits(tmp_path: Path) -> None:
    async with ProcessGroup(tmp_path, grace_s=2) as group:
        group.start("short", [PYTHON, "-c", "import sys; sys.exit(5)"])
        with pytest.raises(ChildExitedError, match="exited with code 5"):
            await asyncio.wait_for(group.watch(interval_s=0.05), timeout=60)


SUPERVISOR_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from launcher.processes import ProcessGroup

    async def main():
        async with ProcessGroup(Path(sys.argv[1]), grace_s=2) as group:
            child = group.start("sleeper", [sys.executable, "-c", "import time; time.sleep(300)"])
            print(child.pid, flush=True)
            await asyncio.sleep(300)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except asyncio.CancelledError:
        sys.exit(143)
    """
)


@pytest.mark.parametrize(("sig", "expected"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_supervisor_signal_leaves_no_child(
    tmp_path: Path, sig: signal.Signals, expected: int, subprocess_env: dict[str, str]
) -> None:
    script = tmp_path / "supervisor.py"
    script.write_text(SUPERVISOR_SCRIPT, encoding="utf-8")
    supervisor = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "logs")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=subprocess_env,
    )
    try:
        assert supervisor.stdout is not None
        child_pid = int(supervisor.stdout.readline())
        assert pid_alive(child_pid)
        supervisor.send_signal(sig)
        assert supervisor.wait(timeout=60) == expected
        assert wait_gone([child_pid], timeout_s=10) == []
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
        if supervisor.stdout is not None:
            supervisor.stdout.close()


ZOMBIE_DRIVER = """
import asyncio, ctypes, sys
from pathlib import Path

import psutil

from launcher.processes import start_process, stop_process

ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans of our children become ours, and we never reap them
LEADER = "import os, time\\nif os.fork() == 0:\\n    os._exit(0)\\ntime.sleep(3600)"


async def main() -> None:
    proc = start_process("leader", [sys.executable, "-c", LEADER], log_dir=Path(sys.argv[1]))
    for _ in range(400):  # until the leader's child has exited (a zombie in the leader's group)
        children = psutil.Process(proc.pid).children()
        if children and children[0].status() == psutil.STATUS_ZOMBIE:
            break
        await asyncio.sleep(0.05)
    else:
        raise SystemExit("the leader's child never exited")
    code = await stop_process(proc, grace_s=3600)  # its child stays a zombie (ours now): nothing runs in the group
    print("stopped", code, flush=True)


asyncio.run(main())
"""


def test_a_group_whose_only_members_left_are_zombies_counts_as_stopped(tmp_path: Path) -> None:
    """A child's helpers that exited but are not reaped yet (zombies: a container's init may take seconds to reap
    what it inherits) hold nothing, so stopping the child must not wait for them. The driver process is a subreaper
    that never reaps, so the zombie stays for as long as the driver lives; before zombies were told apart, stopping
    waited out the whole grace period (an hour here) and the bound below turned that into a failure."""
    done = subprocess.run(
        [PYTHON, "-c", ZOMBIE_DRIVER, str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("stopped "), done.stdout
