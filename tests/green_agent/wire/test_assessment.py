"""The assessment request and the Result artifact: one model on both sides, the wire form unchanged.

The launcher's request text and the service's parse go through :mod:`green_agent.wire.assessment`; these tests pin
the JSON ``arena run`` has always sent, the round trip, and the refusals (each naming the field).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from green_agent.engine.config import ConfigError
from green_agent.wire.assessment import RESULT_ARTIFACT_NAME, AssessmentRequest, ResultArtifact
from launcher.cli.assessment_client import build_request_text

URL = "http://127.0.0.1:9019/"


def test_the_request_text_is_the_json_arena_run_always_sent() -> None:
    text = build_request_text(
        URL, {"k": 2}, "battle-1", backend_url="http://127.0.0.1:9000", resume=True, retry_infra=False
    )
    assert json.loads(text) == {
        "participants": {"white_agent": URL},
        "config": {"k": 2},
        "battle_id": "battle-1",
        "backend_url": "http://127.0.0.1:9000",
        "resume": True,
        "retry_infra": False,
    }
    assert list(json.loads(text)) == ["participants", "config", "battle_id", "backend_url", "resume", "retry_infra"]


def test_a_minimal_request_sends_participants_and_config_only() -> None:
    assert json.loads(build_request_text(URL, {}, None, backend_url=None)) == {
        "participants": {"white_agent": URL},
        "config": {},
    }


def test_extra_fields_a_script_adds_are_sent_at_top_level() -> None:
    assert json.loads(build_request_text(URL, {}, None, note="mine"))["note"] == "mine"


def test_the_green_agent_reads_back_what_the_launcher_sends() -> None:
    text = build_request_text(URL, {"k": 4}, "b-2", backend_url="http://127.0.0.1:1", battle_token="t", resume=True)
    request = AssessmentRequest.from_payload(json.loads(text))
    assert request.white_agent == URL and request.config == {"k": 4} and request.battle_id == "b-2"
    assert (request.backend_url, request.battle_token, request.resume, request.retry_infra) == (
        "http://127.0.0.1:1",
        "t",
        True,
        False,
    )


def test_a_single_participant_of_any_role_is_the_agent_under_test() -> None:
    assert AssessmentRequest.from_payload({"participants": {"agent": URL}}).white_agent == URL


def test_a_backend_url_that_is_not_a_string_means_no_backend() -> None:
    request = AssessmentRequest.from_payload(
        {"participants": {"white_agent": URL}, "backend_url": 3, "battle_token": 4}
    )
    assert request.backend_url is None and request.battle_token is None


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "participants"),
        ({"participants": ["x"]}, "participants"),
        ({"participants": {"a": URL, "b": URL}}, "participants.white_agent"),
        ({"participants": {"white_agent": 5}}, "participants.white_agent"),
        ({"participants": {"white_agent": URL}, "config": [1]}, "config"),
        ({"participants": {"white_agent": URL}, "battle_id": 7}, "battle_id"),
        ({"participants": {"white_agent": URL}, "resume": "yes"}, "resume"),
        ({"participants": {"white_agent": URL}, "retry_infra": 1}, "retry_infra"),
    ],
)
def test_a_malformed_request_is_refused_naming_the_field(payload: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=f"^{field}:"):
        AssessmentRequest.from_payload(payload)


def test_the_result_artifact_reads_the_joined_text_and_the_first_json_object() -> None:
    content = ResultArtifact.read(["# a", "b"], ["not a dict", {"status": "completed"}, {"other": 1}])
    assert content == ResultArtifact(markdown="# a\nb", result={"status": "completed"})
    assert ResultArtifact.read([], []) == ResultArtifact()
    assert RESULT_ARTIFACT_NAME == "Result"
