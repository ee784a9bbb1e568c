"""Importing the adapter keeps tau2 quiet and free of side effects on the process environment."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import os
from green_agent.engine.tau.quiet import quiet_tau2
quiet_tau2(); quiet_tau2()
import green_agent.engine.tau.environment, green_agent.engine.tau.users
from green_agent.engine.tau.tasks import resolve_task
import asyncio
from green_agent.engine.tau.environment import AttemptEnvironment
env = asyncio.run(AttemptEnvironment.create(resolve_task("retail", "test", 0)))
asyncio.run(env.call_tool("get_user_details", {"user_id": "nobody"}))
print("dotenv-disabled-left:", "PYTHON_DOTENV_DISABLED" in os.environ)
print("cost-map:", os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP"))
import sys
print("litellm-imported:", "litellm" in sys.modules)
"""


def test_adapter_import_is_quiet_and_leaves_no_trace() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    assert done.stderr == ""  # no loguru output (".env not found", tool responses at DEBUG)
    assert "dotenv-disabled-left: False" in done.stdout
    assert "cost-map: True" in done.stdout
    assert "litellm-imported: False" in done.stdout  # the serving path never pays the evaluator import
