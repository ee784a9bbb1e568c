"""A tau2 task's gold solution, read from the installed ``tau2`` package: the actions in order and what to tell.

Telecom's tasks have two parties acting on the world: the agent (on the carrier's systems) and the customer (on their
own phone, through tau2's user tools). :attr:`GoldTask.steps` keeps every gold action of both, in tau2's order, each
with its ``requestor``; :attr:`GoldTask.actions` is the agent's share of them (all of them outside telecom).

Why a module: replay and flaky both need it, and loading tau2 is slow and synchronous (callers run
:func:`load_gold_task` in a thread). The per-(domain, split) index is cached at module level; it holds only immutable
package data (frozen dataclasses, arguments as JSON text so nobody can mutate a shared dict).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

_DOMAIN_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class GoldTaskNotFound(LookupError):
    """The arena metadata names a domain, split or task id the installed tau2 does not have."""


@dataclass(frozen=True)
class GoldAction:
    """One gold tool call the assistant must make."""

    name: str
    arguments_json: str
    tool_type: str
    """tau2's ToolType value of the tool: ``read``, ``write``, ``generic`` or ``think`` (``unknown`` if not found)."""
    requestor: str = "assistant"
    """Who performs it: ``assistant`` (the agent, with its tools) or ``user`` (the customer, with the user tools)."""

    @property
    def by_user(self) -> bool:
        """True for the customer's own actions (telecom's device actions), which the agent can only ask for."""
        return self.requestor == "user"

    def arguments(self) -> dict[str, Any]:
        """A fresh copy of the arguments (callers may modify it)."""
        value: dict[str, Any] = json.loads(self.arguments_json)
        return value


@dataclass(frozen=True)
class GoldTask:
    """The gold actions in order and the strings the user must be told (``communicate_info``)."""

    domain: str
    split: str | None
    task_id: str
    actions: tuple[GoldAction, ...]
    """The agent's own gold actions, in order."""
    communicate_info: tuple[str, ...]
    steps: tuple[GoldAction, ...]
    """Every gold action, the agent's and the customer's, in tau2's order (equal to ``actions`` outside telecom)."""


def _quiet_tau2() -> None:
    """tau2 import hygiene: no price-map download by litellm, no loguru debug output."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from loguru import logger

    logger.disable("tau2")


@functools.lru_cache(maxsize=16)
def _tool_types(domain: str, module_name: str = "tools") -> Mapping[str, str]:
    """Tool name -> ToolType value for the toolkits of ``domain`` in ``module_name`` (``tools``: the agent's,
    ``user_tools``: the customer's), built without a database."""
    _quiet_tau2()
    from tau2.environment.toolkit import ToolKitBase

    module = importlib.import_module(f"tau2.domains.{domain}.{module_name}")
    types: dict[str, str] = {}
    for value in vars(module).values():
        if inspect.isclass(value) and issubclass(value, ToolKitBase) and value.__module__ == module.__name__:
            toolkit: Any = value  # tau2 is untyped
            kit = toolkit(None)
            for tool_name in kit.tools:
                types[tool_name] = kit.tool_type(tool_name).value
    return MappingProxyType(types)


_TOOL_MODULES = {"assistant": "tools", "user": "user_tools"}
"""Where each party's toolkit lives in a tau2 domain package."""


def _types_or_none(domain: str, module_name: str) -> Mapping[str, str]:
    try:
        return _tool_types(domain, module_name)
    except ModuleNotFoundError:  # domains without user tools
        return MappingProxyType({})


@functools.lru_cache(maxsize=16)
def _task_index(domain: str, split: str | None) -> Mapping[str, GoldTask]:
    """All tasks of ``domain``/``split`` by tau2 task id."""
    if not _DOMAIN_NAME.match(domain):
        raise GoldTaskNotFound(f"invalid domain name {domain!r}")
    _quiet_tau2()
    try:
        environment = importlib.import_module(f"tau2.domains.{domain}.environment")
    except ModuleNotFoundError:
        raise GoldTaskNotFound(f"tau2 has no domain {domain!r}") from None
    try:
        tasks = environment.get_tasks(split)
    except ValueError as error:
        raise GoldTaskNotFound(f"domain {domain!r} has no split {split!r}: {error}") from None
    types = {requestor: _types_or_none(domain, module) for requestor, module in _TOOL_MODULES.items()}
    index: dict[str, GoldTask] = {}
    for task in tasks:
        criteria = task.evaluation_criteria
        steps = tuple(
            GoldAction(
                name=action.name,
                arguments_json=json.dumps(action.arguments),
                tool_type=types.get(str(action.requestor), {}).get(action.name, "unknown"),
                requestor=str(action.requestor),
            )
            for action in ((criteria.actions or []) if criteria else [])
        )
        info = tuple((criteria.communicate_info or []) if criteria else [])
        index[str(task.id)] = GoldTask(
            domain=domain,
            split=split,
            task_id=str(task.id),
            actions=tuple(step for step in steps if step.requestor == "assistant"),
            communicate_info=info,
            steps=steps,
        )
    return MappingProxyType(index)


def load_gold_task(domain: str, split: str | None, task_id: str) -> GoldTask:
    """The gold solution of tau2 task ``task_id`` in ``domain``/``split`` (blocking: call it in a thread)."""
    index = _task_index(domain, split)
    try:
        return index[task_id]
    except KeyError:
        raise GoldTaskNotFound(f"no task {task_id!r} in {domain}/{split}") from None
