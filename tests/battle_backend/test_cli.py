"""The command line: options map onto settings; `python -m battle_backend --help` works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from battle_backend.__main__ import build_parser, main, settings_from_args

REPO = Path(__file__).resolve().parents[2]


def test_options_become_settings(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "--host",
            "0.0.0.0",
            "--port",
            "9100",
            "--db",
            str(tmp_path / "x.sqlite3"),
            "--max-concurrent-battles",
            "2",
            "--ready-timeout",
            "7",
            "--battle-timeout-default",
            "600",
            "--require-token",
            "--public-url",
            "http://arena:9100/",
        ]
    )
    settings = settings_from_args(args)
    assert (args.host, args.port) == ("0.0.0.0", 9100)
    assert settings.db_path == tmp_path / "x.sqlite3"
    assert settings.max_concurrent_battles == 2
    assert settings.ready_timeout_s == 7 and settings.battle_timeout_default_s == 600
    assert settings.require_token is True
    assert settings.public_url == "http://arena:9100"


def test_defaults_match_agentbeats() -> None:
    settings = settings_from_args(build_parser().parse_args([]))
    assert settings.ready_timeout_s == 120 and settings.ready_poll_interval_s == 5
    assert settings.battle_timeout_default_s == 300
    assert settings.max_concurrent_battles == 4 and settings.require_token is False
    assert str(settings.db_path) == "arena_backend.sqlite3"


def test_invalid_values_are_refused() -> None:
    with pytest.raises(SystemExit):
        main(["--max-concurrent-battles", "0"])
    with pytest.raises(SystemExit):
        main(["--public-url", "ftp://x"])


def test_module_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "battle_backend", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0
    assert "--require-token" in done.stdout and "--db" in done.stdout
