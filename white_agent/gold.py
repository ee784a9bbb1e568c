"""A tau2 task's gold solution, read from the installed ``tau2`` package: the assistant's actions and what to tell.

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

    def arguments(self) -> dict[str, Any]:
        """A fresh copy of the arguments (callers may modify it)."""
        value: dict[str, Any] = json.loads(self.arguments_json)
        return value


@dataclass(frozen=True)
class GoldTask:
    """The assistant's gold actions in order and the strings the user must be told (``communicate_info``)."""

    domain: str
    split: str | None
    task_id: str
    actions: tuple[GoldAction, ...]
    communicate_info: tuple[str, ...]


def _quiet_tau2() -> None:
    """tau2 import hygiene: no price-map download by litellm, no loguru debug output."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from loguru import logger

    logger.disable("tau2")


@functools.lru_cache(maxsize=8)
def _tool_types(domain: str) -> Mapping[str, str]:
    """Tool name -> ToolType value for the assistant toolkits of ``domain`` (built without a database)."""
    _quiet_tau2()
    from tau2.environment.toolkit import ToolKitBase

    module = importlib.import_module(f"tau2.domains.{domain}.tools")
    types: dict[str, str] = {}
    for value in vars(module).values():
        if inspect.isclass(value) and issubclass(value, ToolKitBase) and value.__module__ == module.__name__:
            toolkit: Any = value  # tau2 is untyped
            kit = toolkit(None)
            for tool_name in kit.tools:
                types[tool_name] = kit.tool_type(tool_name).value
    return MappingProxyType(types)


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
    try:
        types = _tool_types(domain)
    except ModuleNotFoundError:
        types = MappingProxyType({})
    index: dict[str, GoldTask] = {}
    for task in tasks:
        criteria = task.evaluation_criteria
        actions = tuple(
            GoldAction(
                name=action.name,
                arguments_json=json.dumps(action.arguments),
                tool_type=types.get(action.name, "unknown"),
            )
            for action in ((criteria.actions or []) if criteria else [])
            if action.requestor == "assistant"
        )
        info = tuple((criteria.communicate_info or []) if criteria else [])
        index[str(task.id)] = GoldTask(
            domain=domain, split=split, task_id=str(task.id), actions=actions, communicate_info=info
        )
    return MappingProxyType(index)


def load_gold_task(domain: str, split: str | None, task_id: str) -> GoldTask:
    """The gold solution of tau2 task ``task_id`` in ``domain``/``split`` (blocking: call it in a thread)."""
    index = _task_index(domain, split)
    try:
        return index[task_id]
    except KeyError:
        raise GoldTaskNotFound(f"no task {task_id!r} in {domain}/{split}") from None
