"""The attempt-lease API (issue 29): a battle's attempts published by its owner, leased by pool members.

Authorisation (docs/design/attempt-leases.md):
- the owner publishes, heartbeats and reads with the battle's token (``X-Battle-Token`` or ``Authorization:
  Bearer``), which only the green agent the battle started on receives;
- pool members lease, heartbeat, record, report infrastructure errors, read and take over with the pool key
  (``X-Pool-Key``): a secret the operator gives every green agent of the pool; the owner's first publish fixes it
  for the battle (the backend keeps only its SHA-256). A worker of another pool, or with another key, is refused
  (403) and sees no attempts.

Every lease and heartbeat call also records its worker as a live member of the pool (under the key it presented);
``GET /pools/{pool}/members`` answers how many were seen recently, so members can divide per-provider caps.

Bodies are read under ``max_request_bytes`` and validated by :mod:`battle_backend.http.lease_models` (422 naming
the field). Refusals: 401 token, 403 pool key, 404 no battle or queue, 409 a lease that is not the attempt's live
one (``reason``: fenced, expired, wrong_worker, not_leased, not_found) or an owner still alive, 422 a publish the
store cannot take (naming the field). Store work is async (SQLite's writer thread, PostgreSQL's pool): nothing here
blocks the event loop; a lease request waits for work at most ``wait_s`` (30 s).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, TypeVar

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from battle_backend.battles.api_models import ApiError, validate_data
from battle_backend.http.body import read_json
from battle_backend.http.lease_models import (
    DEFAULT_MEMBERS_WINDOW_S,
    MAX_ID_CHARS,
    MAX_MEMBERS_WINDOW,
    MAX_PAGE,
    MIN_MEMBERS_WINDOW_S,
    AttemptOut,
    AttemptsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    InfraErrorRequest,
    LeaseOut,
    LeaseRequest,
    LeaseResponse,
    MembersResponse,
    OwnerRequest,
    OwnerResponse,
    PublishRequest,
    PublishResponse,
    RecordRequest,
    RecordResponse,
)
from battle_backend.http.routes_api import backend
from battle_backend.http.security import presented_token
from battle_backend.store.attempt_errors import (
    LeaseRefused,
    OwnerAlive,
    PoolKeyRejected,
    PublishRefused,
    QueueNotFound,
)
from battle_backend.store.attempt_records import AttemptQueue, AttemptSpec
from battle_backend.store.protocol import BattleNotFound, StoreError, TokenRejected

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
POOL_KEY_HEADER = "x-pool-key"
MAX_KEY_CHARS = 1024


def _queue(request: Request) -> AttemptQueue:
    return backend(request).store.attempts


async def _body(request: Request, model: type[M]) -> M:
    settings = backend(request).settings
    data = await read_json(request, settings, limit=settings.max_request_bytes, setting="max_request_bytes")
    parsed: M = validate_data(model, data)
    return parsed


def _name(request: Request, param: str) -> str:
    value = str(request.path_params[param])
    if not value or len(value) > MAX_ID_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ApiError(404, f"No {param.replace('_', ' ')} {value[:64]!r}")
    return value


def _pool_key(request: Request, *, required: bool = True) -> str | None:
    key = request.headers.get(POOL_KEY_HEADER, "").strip()
    if not key:
        if required:
            raise ApiError(
                401, "The pool key is needed: send it as 'X-Pool-Key: <key>'", {"WWW-Authenticate": "Bearer"}
            )
        return None
    if len(key) > MAX_KEY_CHARS:
        raise ApiError(403, "The presented pool key is not this pool's")
    return key


def _token(request: Request, *, required: bool = True) -> str | None:
    token = presented_token(request.headers)
    if token is None and required:
        raise ApiError(
            401, "The battle's token is needed: send it as 'X-Battle-Token: <token>'", {"WWW-Authenticate": "Bearer"}
        )
    return token


def _query_int(request: Request, name: str, default: int, most: int, *, least: int = 0) -> int:
    """An integer query parameter from ``least`` to ``most`` (422 naming it otherwise)."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 10) or not least <= int(raw) <= most:
        message = f"an integer from {least} to {most}"
        raise ApiError(422, [{"type": "int_parsing", "loc": ["query", name], "msg": message}])
    return int(raw)


def _refusal(exc: StoreError) -> ApiError:
    """The store's refusal as an HTTP answer."""
    if isinstance(exc, TokenRejected):
        return ApiError(401, f"Battle {exc.battle_id}: {exc.reason}", {"WWW-Authenticate": "Bearer"})
    if isinstance(exc, PoolKeyRejected):
        return ApiError(403, str(exc))
    if isinstance(exc, BattleNotFound | QueueNotFound):
        return ApiError(404, str(exc))
    if isinstance(exc, LeaseRefused):
        return ApiError(409, {"reason": exc.reason, "msg": exc.detail, "loc": ["body", "lease"]})
    if isinstance(exc, OwnerAlive):
        return ApiError(409, {"reason": "owner_alive", "msg": str(exc), "owner_worker": exc.owner})
    if isinstance(exc, PublishRefused):
        loc = ["body", *[int(p) if p.isdigit() else p for p in exc.field.replace("[", ".").replace("]", "").split(".")]]
        return ApiError(422, [{"type": "value_error", "loc": loc, "msg": exc.detail}])
    raise exc


async def publish(request: Request) -> JSONResponse:
    """The owner publishes attempts (idempotent per key)."""
    battle_id = _name(request, "battle_id")
    token, key = _token(request), _pool_key(request)
    body = await _body(request, PublishRequest)
    specs = [AttemptSpec(a.task_key, a.attempt, a.payload) for a in body.attempts]
    try:
        outcome = await _queue(request).publish(
            battle_id,
            presented_token=token or "",
            pool=body.pool,
            pool_key=key or "",
            owner_worker=body.owner_worker,
            attempts=specs,
            max_requeues=body.max_requeues,
            owner_ttl_s=body.owner_ttl_s,
        )
    except StoreError as exc:
        raise _refusal(exc) from exc
    return _json(PublishResponse(added=outcome.added, already=outcome.already))


async def list_attempts(request: Request) -> JSONResponse:
    """Every attempt of the battle, with results and lease history (the battle's token or the pool key)."""
    battle_id = _name(request, "battle_id")
    token, key = _token(request, required=False), _pool_key(request, required=False)
    if token is None and key is None:
        raise ApiError(401, "The battle's token or the pool key is needed to read its attempts")
    offset, limit = _query_int(request, "offset", 0, 10**9), _query_int(request, "limit", MAX_PAGE, MAX_PAGE, least=1)
    try:  # the counts and the page from one transaction: they describe the same moment
        info, attempts = await _queue(request).attempts_page(
            battle_id, presented_token=token, pool_key=key, offset=offset, limit=limit
        )
    except StoreError as exc:
        raise _refusal(exc) from exc

    def page() -> JSONResponse:  # up to MAX_PAGE stored results of up to max_request_bytes each: off the loop
        return _json(
            AttemptsResponse(
                battle_id=battle_id,
                pool=info.pool,
                owner_worker=info.owner_worker,
                counts=info.counts,
                attempts=[AttemptOut.of(a) for a in attempts],
                next_offset=offset + len(attempts) if offset + len(attempts) < sum(info.counts.values()) else None,
            )
        )

    return await asyncio.to_thread(page)


async def owner(request: Request) -> JSONResponse:
    """The owner's heartbeat (battle token), or a member's takeover of a silent owner (pool key)."""
    battle_id = _name(request, "battle_id")
    token, key = _token(request, required=False), _pool_key(request, required=False)
    body = await _body(request, OwnerRequest)
    queue = _queue(request)
    try:
        if token is not None:
            await queue.owner_heartbeat(battle_id, token, body.worker_id)
            return _json(OwnerResponse(owner_worker=body.worker_id))
        if key is None:
            raise ApiError(401, "The battle's token (owner) or the pool key (takeover) is needed")
        if body.pool is None:
            raise ApiError(422, [{"type": "missing", "loc": ["body", "pool"], "msg": "a takeover names the pool"}])
        battle_token = await queue.claim_owner(battle_id, body.pool, key, body.worker_id)
    except StoreError as exc:
        raise _refusal(exc) from exc
    logger.info("battle %s: worker %s took over as owner", battle_id, body.worker_id)
    return _json(OwnerResponse(owner_worker=body.worker_id, battle_token=battle_token))


async def lease(request: Request) -> JSONResponse:
    """Up to ``limit`` attempts; waits up to ``wait_s`` (woken by publishes and requeues) when none is free."""
    pool, key = _name(request, "pool"), _pool_key(request) or ""
    body = await _body(request, LeaseRequest)
    queue = _queue(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.wait_s
    while True:
        try:
            leases = await queue.lease(pool, key, body.worker_id, limit=body.limit, ttl_s=body.ttl_s)
        except StoreError as exc:
            raise _refusal(exc) from exc
        remaining = deadline - loop.time()
        if leases or remaining <= 0:
            return _json(LeaseResponse(leases=[LeaseOut.of(one) for one in leases]))
        await queue.wait_for_work(pool, remaining)


async def members(request: Request) -> JSONResponse:
    """The pool's members seen within ``window_s`` (default 3x the lease wait cap): how many, and the ids of the most
    recently seen (at most 256). A green agent divides its per-provider caps by the count."""
    pool, key = _name(request, "pool"), _pool_key(request) or ""
    window_s = _query_int(
        request, "window_s", int(DEFAULT_MEMBERS_WINDOW_S), MAX_MEMBERS_WINDOW, least=MIN_MEMBERS_WINDOW_S
    )
    try:
        found = await _queue(request).members(pool, key, float(window_s))
    except StoreError as exc:
        raise _refusal(exc) from exc
    return _json(MembersResponse.of(found))


async def heartbeat(request: Request) -> JSONResponse:
    """Extend a live lease (409 when it is no longer the attempt's live lease: stop working on it)."""
    pool, key = _name(request, "pool"), _pool_key(request) or ""
    body = await _body(request, HeartbeatRequest)
    try:
        await _queue(request).heartbeat(pool, key, body.lease.ref(), body.ttl_s)
    except StoreError as exc:
        raise _refusal(exc) from exc
    return _json(HeartbeatResponse(ttl_s=body.ttl_s))


async def record(request: Request) -> JSONResponse:
    """The attempt's result, stored once (``status`` duplicate for the same lease's retry)."""
    pool, key = _name(request, "pool"), _pool_key(request) or ""
    body = await _body(request, RecordRequest)
    try:
        outcome = await _queue(request).record(pool, key, body.lease.ref(), body.result)
    except StoreError as exc:
        raise _refusal(exc) from exc
    return _json(RecordResponse(status=outcome.status.value, attempt=AttemptOut.of(outcome.attempt)))


async def infra_error(request: Request) -> JSONResponse:
    """The harness failed the attempt: requeued, or failed once its requeues are used up."""
    pool, key = _name(request, "pool"), _pool_key(request) or ""
    body = await _body(request, InfraErrorRequest)
    try:
        outcome = await _queue(request).report_infra_error(pool, key, body.lease.ref(), body.error)
    except StoreError as exc:
        raise _refusal(exc) from exc
    return _json(RecordResponse(status=outcome.status.value, attempt=AttemptOut.of(outcome.attempt)))


def _json(model: BaseModel) -> JSONResponse:
    data: Any = model.model_dump(mode="json")
    return JSONResponse(data)


def lease_routes() -> list[Route]:
    """The routes (paths never overlap the AgentBeats API's ``/battles/{battle_id}``)."""
    return [
        Route("/battles/{battle_id}/attempts", publish, methods=["POST"]),
        Route("/battles/{battle_id}/attempts", list_attempts, methods=["GET"]),
        Route("/battles/{battle_id}/owner", owner, methods=["POST"]),
        Route("/pools/{pool}/leases", lease, methods=["POST"]),
        Route("/pools/{pool}/members", members, methods=["GET"]),
        Route("/pools/{pool}/leases/heartbeat", heartbeat, methods=["POST"]),
        Route("/pools/{pool}/leases/record", record, methods=["POST"]),
        Route("/pools/{pool}/leases/error", infra_error, methods=["POST"]),
    ]
