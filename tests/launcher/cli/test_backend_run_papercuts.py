"""``arena run --backend`` as a user meets it, through the CLI:

- one run directory per battle whatever the flags: with ``--battle-id`` and ``--backend local`` the logs and the
  backend's database end in the battle's run directory (no second directory), which ``arena view``, ``export`` and
  ``compare`` accept, and whose backend_run.json names the moved database;
- ``--open`` with no browser available says so and prints the page's URL;
- two runs against one backend register the agents once (the second run reuses them by name and URL).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from launcher.cli.backend_agents import earlier_ports, reuse_lock, same_registration, white_alias
from launcher.cli.backend_dirs import merge_into_run
from launcher.cli.scenario import WhiteAgentConfig
from launcher.ports import free_port, loopback_url

REPO = Path(__file__).resolve().parents[3]
SCENARIO = (
    '[pass_k_config]\nmode = "manual"\nk = 2\ndomain = "retail"\ntask_index = 0\ncalibration = true\n'
    '[white_agent]\nkind = "replay"\n'
)

needs_agents = pytest.mark.skipif(
    importlib.util.find_spec("green_agent.service.a2a_server") is None
    or importlib.util.find_spec("white_agent") is None,
    reason="needs the green agent and the white agents",
)


def no_browser_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DISPLAY", "WAYLAND_DISPLAY", "COLUMNS", "LINES"}}
    return {**env, "BROWSER": "arena-test-no-such-browser", "PYTHONPATH": str(REPO)}


def arena(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        cwd=cwd,
        env=no_browser_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@needs_agents
@pytest.mark.slow
def test_battle_id_with_a_local_backend_leaves_one_run_directory_every_command_accepts(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(SCENARIO, encoding="utf-8")
    done = arena(tmp_path, "run", "s.toml", "--backend", "local", "--battle-id", "named", "--open", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads(done.stdout)
    (run_dir,) = (tmp_path / "runs").iterdir()  # one directory: the battle's
    assert run_dir.name == verdict["battle_id"] and run_dir.name != "named"
    assert {"run.json", "summary.json", "backend.sqlite3", "backend_run.json", "logs"} <= {
        p.name for p in run_dir.iterdir()
    }
    assert (run_dir / "logs" / "backend.stderr.log").is_file() and (
        run_dir / "logs" / "white_agent.stderr.log"
    ).is_file()
    record = json.loads((run_dir / "backend_run.json").read_text(encoding="utf-8"))
    assert (tmp_path / record["database"]).resolve() == (run_dir / "backend.sqlite3").resolve()
    output = " ".join(done.stderr.split())
    assert f"--open: no web browser could be started here; open {verdict['battle_url']} yourself" in output
    assert f"the backend names the battle {run_dir.name}" in output

    exported = arena(tmp_path, "export", str(run_dir))
    assert exported.returncode == 0, exported.stdout + exported.stderr
    compared = arena(tmp_path, "compare", str(run_dir), str(run_dir))
    assert compared.returncode != 2, compared.stdout + compared.stderr
    viewed = arena(tmp_path, "view", str(run_dir), "--no-wait")
    assert viewed.returncode == 0, viewed.stdout + viewed.stderr


@pytest.fixture
def backend_url(tmp_path: Path) -> Iterator[str]:
    """Our backend, running on its own (as a user's would), on a free loopback port."""
    port = free_port()
    url = loopback_url(port)
    argv = [sys.executable, "-m", "battle_backend", "--port", str(port), "--db", str(tmp_path / "b.sqlite3")]
    with (tmp_path / "backend.log").open("w") as log:
        proc = subprocess.Popen([*argv, "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, "the backend did not start"
                time.sleep(0.1)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@needs_agents
@pytest.mark.slow
def test_two_runs_against_one_backend_register_the_agents_once(tmp_path: Path, backend_url: str) -> None:
    (tmp_path / "s.toml").write_text(SCENARIO, encoding="utf-8")
    for _ in range(2):
        done = arena(tmp_path, "run", "s.toml", "--backend", backend_url, "-q")
        assert done.returncode == 0, done.stdout + done.stderr
    agents = httpx.get(backend_url + "/agents", timeout=10).json()
    assert len(agents) == 2, [a["register_info"] for a in agents]
    battles = httpx.get(backend_url + "/battles?history=false", timeout=10).json()
    assert len(battles) == 2 and {b["state"] for b in battles} == {"finished"}
    assert len({b["green_agent_id"] for b in battles}) == 1


def test_a_different_white_agent_gets_a_registration_of_its_own() -> None:
    replay, flaky = WhiteAgentConfig(kind="replay"), WhiteAgentConfig(kind="flaky", seed=3)
    assert white_alias(replay) == white_alias(WhiteAgentConfig(kind="replay"))
    assert white_alias(replay) != white_alias(flaky) != white_alias(WhiteAgentConfig(kind="flaky", seed=4))
    body = {"alias": "a", "agent_url": "http://127.0.0.1:1", "launcher_url": "", "is_green": False}
    assert same_registration({"register_info": {**body, "extra": 1}}, body)
    assert not same_registration({"register_info": {**body, "agent_url": "http://127.0.0.1:2"}}, body)
    assert not same_registration({"register_info": "hostile"}, body)


def test_earlier_ports_are_reused_only_when_free_and_on_loopback() -> None:
    a, b = free_port(), free_port()
    info = {"alias": "x", "agent_url": loopback_url(a), "launcher_url": loopback_url(b)}
    assert earlier_ports([{"register_info": info}], "x", []) == (a, b)
    assert earlier_ports([{"register_info": info}], "y", []) is None
    assert earlier_ports([{"register_info": info}], "x", [a]) is None
    remote = {**info, "agent_url": f"http://example.org:{a}"}
    assert earlier_ports([{"register_info": remote}], "x", []) is None


def test_merge_moves_the_launchers_files_into_the_run(tmp_path: Path) -> None:
    staging, run_dir = tmp_path / "named", tmp_path / "b-1"
    (staging / "logs").mkdir(parents=True)
    (run_dir / "logs").mkdir(parents=True)
    (staging / "logs" / "backend.stderr.log").write_text("b")
    (run_dir / "logs" / "backend.stderr.log").write_text("already")
    (staging / "backend.sqlite3").write_text("db")
    (staging / "scenario.json").write_text("{}")
    (run_dir / "scenario.json").write_text("{}")
    record = {"backend": "local", "backend_url": "http://127.0.0.1:1", "battle_timeout_s": 60}
    (run_dir / "backend_run.json").write_text(json.dumps({**record, "database": str(staging / "backend.sqlite3")}))
    assert merge_into_run(staging, run_dir) == run_dir / "backend.sqlite3"
    assert not staging.exists()
    assert (run_dir / "logs" / "launcher-backend.stderr.log").read_text() == "b"
    assert json.loads((run_dir / "backend_run.json").read_text())["database"] == str(run_dir / "backend.sqlite3")
    assert merge_into_run(run_dir, run_dir) is None


def test_only_one_run_at_a_time_reuses_registrations_on_a_backend() -> None:
    url = loopback_url(free_port())
    with reuse_lock(url) as first, reuse_lock(url) as second, reuse_lock(url + "/other") as elsewhere:
        assert first and not second and elsewhere  # the second run registers agents of its own
    with reuse_lock(url) as again:
        assert again  # released when the run ends
