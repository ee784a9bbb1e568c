"""The green agent's event loop is chosen explicitly: ``--loop``, else ``$ARENA_LOOP``, else asyncio (uvicorn's
``auto`` would switch to uvloop as soon as some package installs it)."""

from __future__ import annotations

import importlib.util

import pytest

from green_agent.service.main import LOOP_ENV, main, select_loop


def test_the_flag_wins_then_the_environment_then_asyncio() -> None:
    assert select_loop(None, None) == "asyncio"
    assert select_loop(None, "") == "asyncio"
    assert select_loop(None, "auto") == "auto"
    assert select_loop("asyncio", "auto") == "asyncio"
    assert select_loop(None, " AsyncIO ") == "asyncio"


def test_an_unknown_loop_is_refused_naming_where_it_came_from() -> None:
    with pytest.raises(ValueError, match=f"^{LOOP_ENV}: must be one of auto, asyncio, uvloop"):
        select_loop(None, "trio")


@pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop is not installed")
def test_uvloop_is_accepted_when_installed() -> None:
    assert select_loop(None, "uvloop") == "uvloop"
    assert select_loop("uvloop", None) == "uvloop"


def test_a_bad_environment_value_exits_2_before_serving(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(LOOP_ENV, "nope")
    assert main(["--port", "1"]) == 2
    assert f"{LOOP_ENV}: must be one of" in capsys.readouterr().err


def test_a_bad_flag_exits_2() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--loop", "nope"])
    assert exited.value.code == 2
