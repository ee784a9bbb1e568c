"""The inside of a tool sandbox (see :mod:`green_agent.engine.tau.sandbox`): one attempt's tau2 environment, served
over a pipe until the parent closes it.

Imported by the fork server before any sandbox is forked (its preload), so the import cost, the domains' validated
template databases and the tool schemas are paid once and shared copy-on-write by every sandbox. A sandbox serves one
attempt and is thrown away, so its environment works on the inherited templates themselves
(:func:`~green_agent.engine.tau.databases.template_environment`): no validation per attempt (airline: ~100 ms), and
whatever the attempt changes stays in the sandbox's own copy-on-write pages. After warming, the fork server freezes
its objects out of garbage collection (green_agent/engine/tau/sandbox_preload.py), so no sandbox ever scans (and
copies) those pages for the collector.

Importing must never fail: warming is best effort and a failure only means the first sandbox of a domain pays.
"""

from __future__ import annotations

import gc
import logging
import pickle
import resource
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from green_agent.engine.config import KNOWN_DOMAINS
from green_agent.engine.tau.quiet import quiet_tau2

quiet_tau2()

from tau2.data_model.message import ToolCall, ToolMessage

from green_agent.engine.tau.databases import DB_SOURCES, lazy_environment, template
from green_agent.engine.tau.environment import _schemas_json, build_environment, schemas
from green_agent.engine.tau.sandbox_cpu import CPU_KEY
from green_agent.engine.tau.tasks import TaskRef, resolve_task

log = logging.getLogger(__name__)

MEMORY_HEADROOM_BYTES = 2 * 1024**3
"""Address space a sandbox may add to what it inherited: a tool call that needs more gets MemoryError (the agent's
fault, reported as such) instead of pushing the machine into swap."""


def _warm() -> None:
    """Validate every domain's templates and generate its tool schemas (the fork server then freezes them)."""
    for domain in KNOWN_DOMAINS:
        try:
            for keyword in DB_SOURCES.get(domain, {}):
                template(domain, keyword)
            _schemas_json(domain, lazy_environment(domain))  # read only; a lazy copy never changes the template
        except Exception:
            log.debug("warming %s in the fork server failed", domain, exc_info=True)


_warm()


def _limit_memory() -> None:
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[0])
        current = pages * resource.getpagesize()
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = current + MEMORY_HEADROOM_BYTES
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        if soft == resource.RLIM_INFINITY or soft > limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError):
        pass  # not Linux, or not allowed: the time limit still bounds the call


def _tool_answer(env: Any, call: ToolCall) -> dict[str, Any]:
    """tau2's ``Environment.get_response`` plus the sync the attempt loop always did after it, except that running
    out of memory or recursion depth is reported as such (tau2 would turn it into an "Error: ..." output that its
    evaluator could not reproduce)."""
    error = False
    try:
        response = env.make_tool_call(call.name, requestor=call.requestor, **call.arguments)
        env.sync_tools()
    except (MemoryError, RecursionError) as exhausted:
        return {"resource": type(exhausted).__name__}
    except Exception as failure:
        response = f"Error: {failure}"
        error = True
    message = ToolMessage(
        id=call.id, content=env.to_json_str(response), requestor=call.requestor, role="tool", error=error
    )
    env.sync_tools()
    return {"ok": message.model_dump(mode="json")}


def _task_ref(
    domain: str, split: str | None, index: int, task_id: str, task_blob: bytes | None, retrieval: str | None = None
) -> TaskRef:
    """The attempt's task: unpickled from the parent's copy when given (telecom's task file takes ~0.7 s to load,
    which the fork server cannot have done for every split), else resolved from the package data."""
    if task_blob is None:
        return resolve_task(domain, split, index, retrieval)
    task = pickle.loads(task_blob)
    return TaskRef(domain=domain, split=split, index=index, task_id=task.id, task=task, retrieval=retrieval)


def serve(
    connection: Connection,
    domain: str,
    split: str | None,
    index: int,
    task_id: str,
    task_blob: bytes | None = None,
    retrieval: str | None = None,
) -> None:
    """Build the attempt's environment, then answer tool calls until the parent closes the pipe."""
    gc.set_threshold(100_000, 50, 100)
    gc.enable()  # off in the fork server (green_agent/engine/tau/sandbox_preload.py)
    _limit_memory()
    env: Any = None
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):
            return
        op = request.get("op")
        try:
            if op == "init":
                ref = _task_ref(domain, split, index, task_id, task_blob, retrieval)
                if ref.task_id != task_id:
                    answer: dict[str, Any] = {"error": f"task {ref.key} is {ref.task_id!r} here, expected {task_id!r}"}
                else:
                    env, opening = build_environment(ref, disposable=True)
                    tools, user_tools, policy = schemas(domain, ref)
                    answer = {
                        "init": {
                            "tools": tools,
                            "user_tools": user_tools,
                            "policy": policy,
                            "opening": [m.model_dump(mode="json") for m in opening],
                        }
                    }
            elif op == "call" and env is not None:
                answer = _tool_answer(env, ToolCall.model_validate(request["call"]))
            else:
                answer = {"error": f"unexpected request {op!r}"}
        except (MemoryError, RecursionError) as exhausted:
            answer = {"resource": type(exhausted).__name__}
        except Exception as failure:
            last = traceback.extract_tb(failure.__traceback__)[-1:] if failure.__traceback__ else []
            where = f" (at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno})" if last else ""
            answer = {"error": f"{type(failure).__name__}: {failure}{where}"}
        answer[CPU_KEY] = time.process_time()  # the baseline of the next call's CPU time (sandbox_cpu.py)
        try:
            connection.send(answer)
        except (OSError, ValueError):
            return
