"""Property: whatever the white agent answers, no attempt is ever an infrastructure error and the battle never aborts.

Hypothesis generates hostile replies (fixed seed: derandomized; 25 examples; no shrinking, because each example is a
real battle) and each one is the white agent's answer in a real battle (mock task 0, k=2) on ONE shared green agent
subprocess against ONE hostile agent whose behaviour is set per example. Replies vary in

* shape: Message text, Message data parts with odd values, Task replies in odd states, non-JSON bodies, wrong
  JSON-RPC shapes (other id, no "jsonrpc", result of the wrong type, error objects of the wrong type, batches);
* size: up to ~2 MB (texts made of a repeated unit), nesting up to 5000 levels, numbers up to 5000 digits;
* encoding: UTF-8, lone surrogates escaped in the JSON (``\\ud800``), invalid UTF-8 bytes injected raw into the body
  (``\\xff``, CESU-8 surrogates, overlong forms, a NUL), UTF-16 and a UTF-8 BOM;
* transport: status codes, content types, content-length or chunked (no length).

For every example: the battle completes with a result and summary.json, every failure is the white agent's, every
trajectory file is valid UTF-8 JSON lines without lone surrogates, and the green agent still answers /health.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tests.adversarial.conftest import battle_config
from tests.adversarial.harness import (
    GreenAgent,
    assert_completed,
    assert_no_infrastructure_errors,
    check_trajectory_file,
    failure_of,
    run_battle,
    trajectory_paths,
)
from tests.adversarial.hostile_agent import HostileAgent, Reply, Turn, malformed, message_result, task_result

MAX_EXAMPLES = 25
RAW = "@@RAW_BYTES@@"
"""Marker in a text, replaced in the encoded body by the example's raw (invalid UTF-8) bytes."""

TOKENS = [
    "<json>",
    "</json>",
    "```json\n",
    "```",
    "{",
    "}",
    "[",
    "]",
    '"',
    ":",
    ",",
    " ",
    "\n",
    "respond",
    "kwargs",
    '{"name": "respond", "arguments": {"content": "',
    '"}}',
    '{"name": "get_users", "arguments": {}}',
    '{"name": "create_task", "kwargs": "{\\"user_id\\": 1}"}',
    "9" * 50,
    "\\ud800",
    "\\udfff",
    "\ud800",
    "\udfff",
    "\x00",
    "\u2028",
    "é",
    "😀",
    "\ufeff",
    RAW,
]
INVALID_BYTES = [
    b"\xff",
    b"\xfe\xff",
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"\xc0\xaf",
    b"\xe0\x80\xaf",
    b"\x00",
    b"\xf4\x90\x80\x80",
    b"\x80",
]
TARGET_SIZES = [0, 1, 50, 1_000, 60_000, 400_000, 1_100_000, 2_000_000]
TASK_STATES: list[Any] = [
    "completed",
    "working",
    "submitted",
    "input-required",
    "failed",
    "rejected",
    "canceled",
    "auth-required",
    "unknown",
    "",
    None,
    42,
    "COMPLETED",
    "bogus",
    "\ud800",
]
STATUSES = [200, 200, 200, 400, 401, 404, 413, 500, 502, 503]
MEDIA_TYPES = [
    "application/json",
    "application/json",
    "text/plain",
    "text/event-stream",
    "application/octet-stream",
    "text/html",
    None,
]


@dataclass(frozen=True)
class ReplySpec:
    """One hostile answer, built per turn (the JSON-RPC id follows the request unless the shape says otherwise)."""

    shape: str
    text: str = ""
    data: tuple[str, ...] = ()
    """Raw JSON texts of data parts (so numbers of any length and NaN can be written)."""
    state: Any = "completed"
    rpc_variant: str = ""
    raw_bytes: bytes = b""
    body: bytes = b""
    status: int = 200
    media_type: str | None = "application/json"
    encoding: str = "utf-8"
    chunk: int = 0
    """0: one body with content-length; else chunks of this size with no content-length."""
    first_turn_only: bool = False

    def __repr__(self) -> str:  # examples can be megabytes: report them by their shape, never verbatim
        return f"ReplySpec<{self.short()}>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # what hypothesis prints for a failing example
        printer.text(repr(self))

    def short(self) -> str:
        size = len(self.text) + sum(len(d) for d in self.data) + len(self.body)
        return (
            f"{self.shape}/{self.rpc_variant or '-'} size={size} state={self.state!r} status={self.status} "
            f"type={self.media_type} enc={self.encoding} chunk={self.chunk} raw={self.raw_bytes!r} "
            f"first_only={self.first_turn_only}"
        )


# ---------------------------------------------------------------------------------------------------------- strategies
#
# Each example is drawn from a seeded random.Random (st.randoms(use_true_random=True): the seed comes from hypothesis,
# fixed by derandomize). With only 25 examples, hypothesis's own mutation of previous examples would give clusters
# of near-identical replies; independent draws cover the shapes, sizes and encodings evenly.

LEAF_TEXTS = [
    "null",
    "true",
    "false",
    "0",
    "-0",
    "1e308",
    "1e999",
    "-1e999",
    "NaN",
    "Infinity",
    "-Infinity",
    '"\\ud800"',
    '"\\udfff\\ud800"',
    '""',
    "9" * 5000,
    "-" + "1" * 4301,
    "1." + "0" * 5000,
    '"' + "x" * 10_000 + '"',
]
KEYS = ['"name"', '"arguments"', '"kwargs"', '"content"', '"value"', '"\\ud800"', '""']


def _random_text(rnd: random.Random, max_len: int = 12) -> str:
    alphabet = [chr(rnd.randrange(32, 127)) for _ in range(8)] + ["\u00e9", "\u4e2d", "\U0001f600", "\x07", "\t"]
    return "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(max_len + 1)))


def random_text(rnd: random.Random) -> str:
    """A unit of tokens and junk, repeated up to a target size of 0 B .. 2 MB."""
    pieces = [rnd.choice(TOKENS) if rnd.random() < 0.7 else _random_text(rnd) for _ in range(rnd.randrange(1, 13))]
    unit = "".join(pieces) or "x"
    target = rnd.choice(TARGET_SIZES)
    cost = len(json.dumps(unit, ensure_ascii=True))  # bytes per unit in the JSON body (escapes included)
    return unit * max(1, target // cost)


def random_json(rnd: random.Random, depth: int = 0) -> str:
    """Raw JSON text (also invalid-for-strict-parsers values: NaN, 1e999, 5000-digit numbers, deep nesting)."""
    roll = rnd.random()
    if depth >= 3 or roll < 0.35:
        choice = rnd.randrange(3)
        if choice == 0:
            return rnd.choice(LEAF_TEXTS)
        if choice == 1:
            return str(rnd.randrange(-(2**70), 2**70))
        return json.dumps(_random_text(rnd, 20), ensure_ascii=True)
    if roll < 0.5:
        return "[" + ",".join(random_json(rnd, depth + 1) for _ in range(rnd.randrange(5))) + "]"
    if roll < 0.65:
        return (
            "{" + ",".join(f"{rnd.choice(KEYS)}:{random_json(rnd, depth + 1)}" for _ in range(rnd.randrange(5))) + "}"
        )
    if roll < 0.8:
        levels = rnd.choice([10, 100, 1000, 5000])
        return "[" * levels + random_json(rnd, depth + 1) + "]" * levels
    name = rnd.choice(['"respond"', '"get_users"', '"create_task"', "42", '"\\ud800"'])
    key = rnd.choice(['"arguments"', '"kwargs"'])
    return '{"name": ' + name + ", " + key + ": " + random_json(rnd, depth + 1) + "}"


def random_spec(rnd: random.Random) -> ReplySpec:
    shape = rnd.choice(["message_text", "message_text", "message_data", "task", "non_json", "wrong_rpc"])
    common: dict[str, Any] = {
        "first_turn_only": rnd.random() < 0.5,
        "encoding": rnd.choice(["utf-8", "utf-8", "utf-8", "utf-16", "utf-8-sig"]),
        "chunk": rnd.choice([0, 0, 1, 7, 4096, 65536]),
        "raw_bytes": rnd.choice([b"", *INVALID_BYTES]),
    }
    if rnd.random() < 0.2:
        common["status"] = rnd.choice(STATUSES)
        common["media_type"] = rnd.choice(MEDIA_TYPES)
    if shape == "message_text":
        return ReplySpec(shape, text=random_text(rnd), **common)
    if shape == "message_data":
        data = tuple(random_json(rnd) for _ in range(rnd.randrange(1, 4)))
        return ReplySpec(shape, text=rnd.choice(["", "hi", RAW]), data=data, **common)
    if shape == "task":
        return ReplySpec(
            shape,
            text=random_text(rnd),
            state=rnd.choice(TASK_STATES),
            rpc_variant=rnd.choice(["status", "artifact", "empty", "history"]),
            **common,
        )
    if shape == "non_json":
        body = rnd.choice(
            [
                bytes(rnd.randrange(256) for _ in range(rnd.randrange(300))),
                b"",
                b"<html><body>502 Bad Gateway</body></html>",
                b"null",
                b"[]",
                b"{",
                b"\xff\xfe\x00",
                b"data: {}\n\n",
                b"OK",
            ]
        )
        return ReplySpec(shape, body=body, **common)
    return ReplySpec(
        shape,
        text=random_text(rnd),
        rpc_variant=rnd.choice(
            [
                "other_id",
                "no_jsonrpc",
                "result_list",
                "result_number",
                "result_string",
                "result_null",
                "error_weird",
                "error_surrogate",
                "result_and_error",
                "batch",
                "parts_not_list",
                "status_update",
                "jsonrpc_1",
            ]
        ),
        **common,
    )


reply_specs = st.randoms(use_true_random=True, note_method_calls=False).map(random_spec)


# ---------------------------------------------------------------------------------------------------------- bodies


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, allow_nan=True)


def _message_json(turn: Turn, spec: ReplySpec) -> str:
    parts = []
    if spec.text or not spec.data:
        parts.append('{"kind":"text","text":' + _dumps(spec.text) + "}")
    parts += ['{"kind":"data","data":' + data + "}" for data in spec.data]
    context = ',"contextId":' + _dumps(turn.context_id) if turn.context_id else ""
    return (
        '{"kind":"message","messageId":"'
        + uuid.uuid4().hex
        + '","role":"agent","parts":['
        + ",".join(parts)
        + "]"
        + context
        + "}"
    )


def _task_json(turn: Turn, spec: ReplySpec) -> str:
    if spec.rpc_variant == "artifact":
        task = task_result(turn, spec.state, None, artifact_text=spec.text)
    elif spec.rpc_variant == "empty":
        task = task_result(turn, spec.state, None)
    elif spec.rpc_variant == "history":
        task = task_result(turn, spec.state, None)
        task["history"] = [message_result(turn, spec.text)]
    else:
        task = task_result(turn, spec.state, spec.text)
    return _dumps(task)


def _body(turn: Turn, spec: ReplySpec) -> bytes:
    rid = _dumps(turn.request_id)
    if spec.shape == "non_json":
        return spec.body
    if spec.shape == "message_text" or spec.shape == "message_data":
        text = '{"jsonrpc":"2.0","id":' + rid + ',"result":' + _message_json(turn, spec) + "}"
    elif spec.shape == "task":
        text = '{"jsonrpc":"2.0","id":' + rid + ',"result":' + _task_json(turn, spec) + "}"
    else:
        message = _dumps(message_result(turn, spec.text))
        text = {
            "other_id": '{"jsonrpc":"2.0","id":"' + uuid.uuid4().hex + '","result":' + message + "}",
            "no_jsonrpc": '{"id":' + rid + ',"result":' + message + "}",
            "jsonrpc_1": '{"jsonrpc":"1.0","id":' + rid + ',"result":' + message + "}",
            "result_list": '{"jsonrpc":"2.0","id":' + rid + ',"result":[' + message + "]}",
            "result_number": '{"jsonrpc":"2.0","id":' + rid + ',"result":1e999}',
            "result_string": '{"jsonrpc":"2.0","id":' + rid + ',"result":' + _dumps(spec.text[:1000]) + "}",
            "result_null": '{"jsonrpc":"2.0","id":' + rid + ',"result":null}',
            "error_weird": '{"jsonrpc":"2.0","id":' + rid + ',"error":{"code":"x","message":5,"data":' + message + "}}",
            "error_surrogate": '{"jsonrpc":"2.0","id":'
            + rid
            + ',"error":{"code":-32603,"message":"\\ud800 '
            + _dumps(spec.text[:1000])[1:-1]
            + '"}}',
            "result_and_error": '{"jsonrpc":"2.0","id":'
            + rid
            + ',"result":'
            + message
            + ',"error":{"code":-32000,"message":"both"}}',
            "batch": '[{"jsonrpc":"2.0","id":' + rid + ',"result":' + message + "}]",
            "parts_not_list": '{"jsonrpc":"2.0","id":'
            + rid
            + ',"result":{"kind":"message","role":"agent","messageId":"m","parts":"nope"}}',
            "status_update": '{"jsonrpc":"2.0","id":' + rid + ',"result":{"kind":"status-update","taskId":"t",'
            '"contextId":"c","status":{"state":"completed","message":' + message + '},"final":true}}',
        }[spec.rpc_variant]
    if spec.encoding == "utf-16":
        encoded = text.encode("utf-16", "surrogatepass")
        return encoded.replace(RAW.encode("utf-16")[2:], spec.raw_bytes)  # raw bytes: odd lengths break UTF-16
    encoded = text.encode("utf-8", "surrogatepass")
    if spec.encoding == "utf-8-sig":
        encoded = b"\xef\xbb\xbf" + encoded
    return encoded.replace(RAW.encode(), spec.raw_bytes)


def spec_behaviour(spec: ReplySpec) -> Any:
    def build(turn: Turn) -> Reply:
        body = _body(turn, spec)
        headers: dict[str, str] = {}
        media = spec.media_type
        if media == "application/json" and spec.encoding == "utf-16":
            media = "application/json; charset=utf-16"
        if spec.chunk <= 0 or (spec.chunk < 4096 and len(body) > 16 * 1024):
            return Reply(body, status=spec.status, media_type=media, headers=headers, note=spec.shape)
        size = spec.chunk

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(body), size):
                yield body[start : start + size]

        return Reply(chunks, status=spec.status, media_type=media, headers=headers, note=spec.shape + " chunked")

    first = build
    if spec.first_turn_only:
        later = malformed()
        return lambda turn: first(turn) if turn.turn <= 1 else later(turn)
    return first


# ---------------------------------------------------------------------------------------------------------- property


@pytest.fixture(scope="module")
def tally() -> Iterator[Counter[str]]:
    counts: Counter[str] = Counter()
    yield counts
    print(
        f"\n[property] {counts.pop('examples', 0)} examples, {counts.pop('attempts', 0)} attempts; outcomes: "
        f"{dict(counts)}"
    )


EXPLICIT = [
    ReplySpec("message_text", text='<json>{"name": "respond", "arguments": {"content": "\\ud800?"}}</json>'),
    ReplySpec("message_text", text="A" * 2_000_000, chunk=65536),
    ReplySpec("message_text", text=f"<json>{RAW}</json>", raw_bytes=b"\xed\xa0\x80"),
    ReplySpec("message_data", data=('{"name": "respond", "arguments": {"content": "hi", "n": ' + "9" * 5000 + "}}",)),
    ReplySpec("task", text="hello", state="working", rpc_variant="status"),
    ReplySpec("wrong_rpc", text="x", rpc_variant="batch"),
]


@pytest.mark.slow
@pytest.mark.timeout(1800)
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=list(HealthCheck),
)
@given(spec=reply_specs)
@example(spec=EXPLICIT[0])
@example(spec=EXPLICIT[1])
@example(spec=EXPLICIT[2])
@example(spec=EXPLICIT[3])
@example(spec=EXPLICIT[4])
@example(spec=EXPLICIT[5])
def test_no_hostile_reply_is_ever_an_infrastructure_error(
    green: GreenAgent, hostile: HostileAgent, tally: Counter[str], spec: ReplySpec
) -> None:
    hostile.set_behaviour(spec_behaviour(spec))
    config = battle_config(max_steps=4, turn_timeout_s=3.0, attempt_timeout_s=30.0)
    try:
        outcome = asyncio.run(run_battle(green, hostile.served_url, config, timeout_s=120, unresponsive_s=10))
        attempts = assert_completed(outcome, green, attempts=2)
        assert_no_infrastructure_errors(attempts)
        for attempt in attempts:
            if attempt["outcome"] != "success":
                assert failure_of(attempt)[1] == "white_agent", failure_of(attempt)
        for path in trajectory_paths(green, outcome.battle_id):
            check_trajectory_file(path)
        assert green.healthy(timeout_s=5.0), "the green agent must still answer /health"
        assert not hostile.errors, hostile.errors
    except BaseException:
        print(f"\n[property] FAILING example: {spec.short()}")
        raise
    tally["examples"] += 1
    tally["attempts"] += len(attempts)
    for attempt in attempts:
        tally[attempt["outcome"] if attempt["outcome"] == "success" else failure_of(attempt)[0] or "?"] += 1
