"""banking_knowledge (upstream tau2 v1.0.x only): its retrieval variants, and what its environments depend on.

What is different about this domain: tau2 v1.0.x builds a banking_knowledge environment per task, from three things
besides the database: the *retrieval variant* (which knowledge-base search tools the agent gets and which prompt
template its policy is built from), the task itself (``golden_retrieval`` inlines the task's required documents in
the policy) and a per-task ``read_log_allowlist`` (the read-only discoverable tools whose calls are logged in the
database the evaluator hashes: those the task's gold actions call, as tau2's runner derives it). Arena builds every
banking_knowledge environment (attempt, schemas, scoring, explanation) with the same three, as tau2's runner does
(``tau2.runner.build._build_env_kwargs``).

Which tasks: all 97 of ``get_tasks()``. tau2 v1.0.1 ships no split file for the domain (its ``get_tasks`` ignores
the split name) and publishes its banking_knowledge scores over all 97, so a battle names no split
(``split = ""``) and a task index is a position in tau2's task order (task_001 ... task_097, sorted by file name).

Which retrieval variants: the battle config field ``retrieval`` (default :data:`DEFAULT_RETRIEVAL`), one of
:data:`OFFLINE_RETRIEVAL`: those that need only the local knowledge base. The others (:data:`UNAVAILABLE_RETRIEVAL`)
need a hosted embedding model, an LLM reranker, or run the agent's shell commands on the green agent's host, and
are refused with the reason. Names checked against v1.0.1's ``RETRIEVAL_VARIANTS`` by the tau2v1 tests.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task

BANKING = "banking_knowledge"

OFFLINE_RETRIEVAL: tuple[str, ...] = ("bm25", "bm25_grep", "grep_only", "no_knowledge", "full_kb", "golden_retrieval")
"""tau2 v1.0.x retrieval variants that run offline (BM25 and grep over the local documents, or none at all)."""

DEFAULT_RETRIEVAL = "bm25"
"""The variant a banking_knowledge battle runs when its config names none (tau2's own default, ``alltools``, needs
OpenAI embeddings)."""

_EMBEDDINGS = "needs a hosted embedding model ({})"
_RERANKER = "needs an LLM reranker (tau2's pointwise_llm_reranker calls a hosted model)"
UNAVAILABLE_RETRIEVAL: dict[str, str] = {
    "qwen_embeddings": _EMBEDDINGS.format("qwen3-embedding-8b on OpenRouter"),
    "qwen_embeddings_grep": _EMBEDDINGS.format("qwen3-embedding-8b on OpenRouter"),
    "qwen_embeddings_reranker": _EMBEDDINGS.format("qwen3-embedding-8b on OpenRouter") + " and an LLM reranker",
    "qwen_embeddings_reranker_grep": _EMBEDDINGS.format("qwen3-embedding-8b on OpenRouter") + " and an LLM reranker",
    "openai_embeddings": _EMBEDDINGS.format("OpenAI text-embedding-3-large"),
    "openai_embeddings_grep": _EMBEDDINGS.format("OpenAI text-embedding-3-large"),
    "openai_embeddings_reranker": _EMBEDDINGS.format("OpenAI text-embedding-3-large") + " and an LLM reranker",
    "openai_embeddings_reranker_grep": _EMBEDDINGS.format("OpenAI text-embedding-3-large") + " and an LLM reranker",
    "bm25_reranker": _RERANKER,
    "bm25_reranker_grep": _RERANKER,
    "alltools": _EMBEDDINGS.format("OpenAI text-embedding-3-large") + " and a shell on the host",
    "AllTools": _EMBEDDINGS.format("OpenAI text-embedding-3-large") + " and a shell on the host",
    "alltools-qwen": _EMBEDDINGS.format("qwen3-embedding-8b on OpenRouter") + " and a shell on the host",
    "terminal_use": "runs the agent's shell commands on the green agent's host",
    "terminal_use_write": "runs the agent's shell commands on the green agent's host, with writes",
}
"""tau2 v1.0.x retrieval variants Arena does not run, with why (the message that refuses them)."""


def retrieval_problem(name: str) -> str | None:
    """Why ``retrieval = name`` cannot run (the message, starting with the field name), or None when it can."""
    if name in OFFLINE_RETRIEVAL:
        return None
    offline = ", ".join(OFFLINE_RETRIEVAL)
    shown = repr(name[:64])
    why = UNAVAILABLE_RETRIEVAL.get(name)
    if why is not None:
        return f"retrieval {shown} {why}: unavailable offline; the variants that run offline are {offline}"
    return f"retrieval {shown} is not a tau2 retrieval variant; the variants that run offline are {offline}"


def effective_retrieval(domain: str, retrieval: str | None) -> str | None:
    """The variant ``domain``'s environments are built with: the config's or :data:`DEFAULT_RETRIEVAL` for
    banking_knowledge, None for every other domain (they have no retrieval)."""
    if domain != BANKING:
        return None
    return retrieval or DEFAULT_RETRIEVAL


def read_log_allowlist(task: Task) -> set[str]:
    """The discoverable tools the task's gold actions call (``tau2.runner.build._derive_read_log_allowlist``)."""
    names: set[str] = set()
    criteria = task.evaluation_criteria
    for action in (criteria.actions or []) if criteria is not None else []:
        if action.name == "call_discoverable_agent_tool":
            name = (action.arguments or {}).get("agent_tool_name")
            if name:
                names.add(str(name))
    return names


def environment_kwargs(domain: str, task: Task | None, retrieval: str | None) -> dict[str, Any]:
    """Keyword arguments of ``get_environment`` for ``domain`` beyond the databases: empty except for
    banking_knowledge, where they are the variant, the task and its read-log allowlist (as tau2's runner passes)."""
    if domain != BANKING:
        return {}
    kwargs: dict[str, Any] = {"retrieval_variant": effective_retrieval(domain, retrieval)}
    if task is not None:
        kwargs["task"] = task
        kwargs["read_log_allowlist"] = read_log_allowlist(task)
    return kwargs


def policy_key(domain: str, task: Task | None, retrieval: str | None) -> tuple[str, str | None, str | None]:
    """What a domain's tool schemas and policy depend on, as a cache key: the domain, the variant, and for
    ``golden_retrieval`` (whose policy inlines the task's documents) the task."""
    variant = effective_retrieval(domain, retrieval)
    if variant != "golden_retrieval" or task is None:
        return (domain, variant, None)
    return (domain, variant, hashlib.sha256(task.model_dump_json().encode()).hexdigest())
