"""The battle page says what a result was scored on (issue 30): tau2 distribution and version, a short hash of the
whole fingerprint, the user simulator and, for banking_knowledge, the retrieval variant. The fingerprint is posted
data: every string in it is cut and escaped, a malformed one leaves the line out instead of failing the page."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from battle_backend.battles.arena_results import arena_schema_problem
from battle_backend.views.rendering import Renderer
from battle_backend.views.results import build_result_view
from green_agent.engine.fingerprint import DomainFingerprint, Fingerprint, Tau2Build, UserSimulatorFingerprint
from tests.battle_backend.views.test_rendering import unsafe
from tests.green_agent.engine.results.builders import battle_result


def fingerprinted(user: UserSimulatorFingerprint | None = None, retrieval: str | None = None) -> dict[str, Any]:
    """An Arena result as the green agent posts it, with the fingerprint of a v1.0.1 battle."""
    domain = "banking_knowledge" if retrieval else "retail"
    fingerprint = Fingerprint(
        tau2=Tau2Build(distribution="tau2", version="1.0.1", evaluator="e" * 64),
        user_simulator=user or UserSimulatorFingerprint(kind="scripted"),
        domains={domain: DomainFingerprint(database="d" * 64, policy="p" * 64, tools="t" * 64, retrieval=retrieval)},
        tasks={f"{domain}/test/0": "a" * 64, f"{domain}/test/1": "b" * 64},
    )
    data: dict[str, Any] = battle_result().model_dump(mode="json")
    data["fingerprint"] = fingerprint.model_dump(mode="json")
    return data


class _Battle:
    def __init__(self) -> None:
        self.battle_id = "b-1"
        self.result = {"winner": "white_agent", "finish_time": "t"}


def page(data: dict[str, Any]) -> str:
    return Renderer().render("_result.html", battle=_Battle(), view=build_result_view(data))


def test_the_page_shows_the_tau2_build_a_short_hash_and_the_user_simulator() -> None:
    data = fingerprinted()
    assert arena_schema_problem(data) is None  # a valid result
    canonical = json.dumps(data["fingerprint"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    short = hashlib.sha256(canonical.encode()).hexdigest()[:12]
    html = page(data)
    assert 'id="result-fingerprint"' in html
    assert 'Scored on:</span> tau2 1.0.1 · fingerprint <span class="mono" title="' in html
    assert f">{short}</span> · user simulator scripted</p>" in html
    assert "the 2 task hashes" in html and "retrieval" not in html.split('id="result-fingerprint"')[1].split("</p>")[0]


def test_an_llm_user_and_a_banking_variant_are_named() -> None:
    user = UserSimulatorFingerprint(kind="llm", model="gpt-4.1", prompt_hash="f" * 64)
    html = page(fingerprinted(user, retrieval="bm25"))
    assert "user simulator llm gpt-4.1 (prompt ffffffffffff) · retrieval banking_knowledge: bm25</p>" in html


def test_a_different_fingerprint_shows_a_different_hash() -> None:
    a, b = fingerprinted(), fingerprinted(retrieval="grep_only")
    view_a, view_b = build_result_view(a).fingerprint, build_result_view(b).fingerprint
    assert view_a is not None and view_b is not None and view_a.short_hash != view_b.short_hash


def test_a_result_without_a_fingerprint_has_no_line() -> None:
    data: dict[str, Any] = battle_result().model_dump(mode="json")
    data.pop("fingerprint", None)
    assert build_result_view(data).fingerprint is None
    assert 'id="result-fingerprint"' not in page(data)


def test_posted_strings_are_escaped_and_cut_and_malformed_ones_leave_the_line_out() -> None:
    data = fingerprinted(UserSimulatorFingerprint(kind="llm", model="<script>alert(1)</script>" + "m" * 500))
    data["fingerprint"]["tau2"]["version"] = '"><img src=x onerror=alert(1)>'
    html = page(data)
    assert [p for p in unsafe(html) if not p.startswith("tag svg")] == []  # the chart is ours
    assert "&lt;script&gt;" in html and "m" * 100 not in html
    for bad in ({"tau2": "x"}, {**data["fingerprint"], "tasks": [1, 2]}, "not an object"):
        broken = {**data, "fingerprint": bad}
        assert build_result_view(broken).fingerprint is None
        assert 'id="result-fingerprint"' not in page(broken)
