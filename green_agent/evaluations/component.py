"""The evaluations' HTTP surface, mounted on the green agent's server as a
:class:`green_agent.service.a2a_server.Component`.

Routes:
    POST /run                      Fair-Forge-compatible conversation evaluation (JSON in, JSON out)
    POST /evaluations/run          multipart CSV suite (+ agent_url, concurrency, judge, connector) -> SSE stream
    GET  /evaluations/             the web page (static HTML/JS/CSS, no CDN)
    GET  /evaluations/static/...   its assets
    GET  /evaluations/sample.csv   the offline finance sample suite (when available)
    GET  /evaluations/config       defaults and limits for the page

Why a component: the green agent's server owns A2A and battles; evaluations are optional and self-contained. The
component's state (the judge verdict cache) lives on the instance, opened and closed by its lifespan, so two apps
never share it.

Request errors: /run answers the seed's ``{"success": false, "error": ...}`` with HTTP 400 (413 with ``field`` and
``limit`` when the request exceeds :class:`RunLimits`; 500 only for a failure inside the evaluation).
/evaluations/run answers 400 / 413 / 422 JSON (``{"error", "problems": [{row, column, message}]}``) before
streaming; once streaming, failures arrive as an ``error`` event.

Hostile input: bodies are bounded by the green agent's BodyLimitMiddleware (bytes, JSON depth, number length) and
here by :class:`RunLimits` / :class:`CsvLimits`; every string that reaches a response or an event is cleaned of lone
UTF-16 surrogates; parsing, scoring and rendering of anything proportional to the request run in worker threads;
the agent's replies during a CSV run are read up to ``max_reply_bytes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from green_agent.body_limits import json_shape_problem
from green_agent.engine.white_client import DEFAULT_MAX_REPLY_BYTES
from green_agent.evaluations.connectors import ConnectorError, resolve_connector
from green_agent.evaluations.csv_runner import CsvRunOptions, run_csv_suite
from green_agent.evaluations.csv_suite import MAX_BYTES, MAX_CASES, CsvLimits, CsvValidationError, parse_csv_suite
from green_agent.evaluations.fairforge import run_agentic
from green_agent.evaluations.fairforge_request import RunError, RunLimits, error_body
from green_agent.evaluations.judge import Judge, JudgeSettings, LexicalJudge, LlmJudge
from green_agent.evaluations.judge_cache import JudgeCache
from green_agent.evaluations.safe_json import MAX_JSON_DEPTH, JsonRefused, loads_bounded, wire_safe
from green_agent.provider_limits import ProviderLimits

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).with_name("static")
DEFAULT_SAMPLE = Path(__file__).resolve().parents[2] / "scenarios" / "finance_suite.csv"
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass
class EvaluationsSettings:
    """Operator settings of the evaluations endpoints."""

    judge: JudgeSettings = field(default_factory=JudgeSettings)
    csv_max_bytes: int = MAX_BYTES
    csv_max_cases: int = MAX_CASES
    case_timeout_s: float = 60.0
    default_concurrency: int = 4
    max_concurrency: int = 16
    default_agent_url: str | None = None
    sample_csv: Path | None = DEFAULT_SAMPLE
    max_run_body_bytes: int = 20 * 1024 * 1024
    """/run body cap of this component (the server's BodyLimitMiddleware cap applies first when it is lower)."""
    run_limits: RunLimits = field(default_factory=RunLimits)
    csv_limits: CsvLimits = field(default_factory=CsvLimits)
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    """Largest reply read from the agent under test for one CSV case (a larger one errors that case)."""
    max_agent_url_chars: int = 2048


def _bad_request(message: str, status: int = 400, problems: list[dict[str, Any]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if problems is not None:
        body["problems"] = problems
    return JSONResponse(wire_safe(body), status_code=status)


def _run_error(error: RunError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=error.status)


def _load_run_body(raw: bytes) -> Any:
    """The /run body as JSON (worker thread): RunError for anything that is not usable JSON."""
    if not raw.strip():
        return {}
    problem = json_shape_problem(raw, max_depth=MAX_JSON_DEPTH)  # the middleware checks too, when it is mounted
    if problem:
        raise RunError(f"Invalid JSON body: {problem}")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise RunError("Invalid JSON body") from None


def _encode(value: Any) -> str:
    """``value`` as JSON text that encodes as UTF-8 and holds no NaN (cleaned with wire_safe only when needed)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
        return text
    except ValueError:  # NaN / Infinity, or a lone surrogate (UnicodeEncodeError is a ValueError)
        return json.dumps(wire_safe(value), ensure_ascii=False, allow_nan=False)


def _render(result: dict[str, Any]) -> bytes:
    """The /run answer as UTF-8 JSON (worker thread), the same text ``json.dumps`` gives.

    Encoded a conversation at a time: the C encoder holds the GIL for the whole of one call, and one call on a
    result of thousands of conversations would stall the event loop for a few hundred milliseconds.
    """
    items = []
    for key, value in result.items():
        if key == "per_conversation_metrics" and isinstance(value, list):
            encoded = "[" + ", ".join(_encode(item) for item in value) + "]"
        else:
            encoded = _encode(value)
        items.append(f"{_encode(key)}: {encoded}")
    return ("{" + ", ".join(items) + "}").encode("utf-8")


def _agent_url_problem(url: str, max_chars: int) -> str | None:
    if not url.startswith(("http://", "https://")):
        return "agent_url is required (the A2A URL of the agent under test, http:// or https://)"
    if len(url) > max_chars:
        return f"agent_url is longer than {max_chars} characters"
    try:
        host = httpx.URL(url).host
    except (httpx.InvalidURL, ValueError):
        return "agent_url is not a valid URL"
    return None if host else "agent_url has no host"


class EvaluationsComponent:
    """Mounts /run and /evaluations/* (see the module docstring)."""

    def __init__(self, settings: EvaluationsSettings | None = None) -> None:
        self.settings = settings or EvaluationsSettings()
        self._cache: JudgeCache | None = None

    # -- Component protocol -------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, registry: object) -> AsyncIterator[None]:
        """Open the verdict cache (when configured) for the app's lifetime (the battle registry is not needed here;
        it is typed ``object`` because the evaluations import nothing of the service)."""
        providers = getattr(registry, "providers", None)  # the app's provider limits, shared with its battles
        if isinstance(providers, ProviderLimits) and self.settings.judge.providers is None:
            self.settings = dataclasses.replace(
                self.settings, judge=dataclasses.replace(self.settings.judge, providers=providers)
            )
        path = self.settings.judge.cache_path
        if path is None:
            yield
            return
        async with JudgeCache(path) as cache:
            self._cache = cache
            try:
                yield
            finally:
                self._cache = None

    def routes(self, registry: Callable[[], object]) -> list[BaseRoute]:
        """The routes (the battle registry is not needed here)."""
        return [
            Route("/run", self.run, methods=["POST"]),
            Route("/evaluations/run", self.evaluations_run, methods=["POST"]),
            Route("/evaluations", self.page_redirect, methods=["GET"]),
            Route("/evaluations/", self.page, methods=["GET"]),
            Route("/evaluations/sample.csv", self.sample, methods=["GET"]),
            Route("/evaluations/config", self.page_config, methods=["GET"]),
            Mount("/evaluations/static", app=StaticFiles(directory=STATIC_DIR), name="evaluations-static"),
        ]

    # -- /run ---------------------------------------------------------------------------------------------------

    async def run(self, request: Request) -> Response:
        """Fair-Forge-compatible agentic evaluation."""
        cap = self.settings.max_run_body_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and len(declared) < 20 and int(declared) > cap:
            return _run_error(RunError(f"Request body too large (the limit is {cap} bytes)", 413))
        raw = bytearray()
        async for chunk in request.stream():  # chunked bodies have no Content-Length: count what arrives
            raw += chunk
            if len(raw) > cap:
                return _run_error(RunError(f"Request body too large (the limit is {cap} bytes)", 413))
        try:
            # large bodies (1,000 conversations is ~1 MB) are parsed and rendered off the event loop
            payload = await asyncio.to_thread(_load_run_body, bytes(raw))
            result = await run_agentic(payload, self.settings.judge, cache=self._cache, limits=self.settings.run_limits)
        except RunError as error:
            return _run_error(error)
        body = await asyncio.to_thread(_render, result)
        return Response(body, media_type="application/json")

    # -- CSV suites ---------------------------------------------------------------------------------------------

    def _judge_for(self, form: Any) -> tuple[Judge | None, str | None]:
        choice = str(form.get("judge") or "lexical").strip().lower()
        if choice not in ("lexical", "llm"):
            return None, "judge must be 'lexical' or 'llm'"
        if choice == "lexical" or self.settings.judge.offline:
            return LexicalJudge(), None
        raw = form.get("connector")
        if not raw:
            return None, 'judge \'llm\' needs a connector (JSON: {"class_path": ..., "params": {...}})'
        try:
            block = loads_bounded(str(raw))
        except json.JSONDecodeError:
            return None, "connector is not valid JSON"
        except JsonRefused as error:
            return None, f"connector is not valid JSON: {error}"
        if not isinstance(block, dict):
            return None, "connector must be a JSON object"
        structured = str(form.get("use_structured_output") or "true").strip().lower() not in ("false", "0", "no")
        judge_settings = self.settings.judge
        try:
            resolved = resolve_connector(
                block,
                environ=judge_settings.environ,
                base_url_overrides=judge_settings.base_url_overrides,
                allow_base_url=judge_settings.allow_base_url,
            )
        except ConnectorError as error:
            return None, f"Failed to create LLM connector: {error}"
        return LlmJudge(
            resolved,
            use_structured_output=structured,
            cache=self._cache,
            retry=judge_settings.retry,
            max_concurrency=judge_settings.max_concurrency,
            providers=judge_settings.providers,
            http_client=judge_settings.http_client,
        ), None

    async def evaluations_run(self, request: Request) -> Response:
        """Validate the upload, then stream the run as server-sent events."""
        limit = self.settings.csv_max_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit + 256 * 1024:
            return _bad_request(f"upload too large: the CSV limit is {limit} bytes", 413)
        try:
            form = await request.form(max_files=1, max_fields=20, max_part_size=64 * 1024)
        except (HTTPException, ValueError, AssertionError) as error:
            return _bad_request(f"expected multipart/form-data with a 'file' field ({error})")
        try:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                return _bad_request("missing 'file' (the CSV test suite)")
            data = await upload.read(limit + 1)
            agent_url = str(form.get("agent_url") or self.settings.default_agent_url or "").strip()
            url_problem = _agent_url_problem(agent_url, self.settings.max_agent_url_chars)
            if url_problem:
                return _bad_request(url_problem)
            raw_concurrency = str(form.get("concurrency") or self.settings.default_concurrency).strip()
            if not raw_concurrency.isascii() or not raw_concurrency.isdigit() or len(raw_concurrency) > 6:
                return _bad_request(f"concurrency must be an integer between 1 and {self.settings.max_concurrency}")
            concurrency = int(raw_concurrency)
            if not 1 <= concurrency <= self.settings.max_concurrency:
                return _bad_request(f"concurrency must be between 1 and {self.settings.max_concurrency}")
            judge, problem = self._judge_for(form)
            if judge is None:
                return _bad_request(problem or "bad judge settings")
        finally:
            await form.close()
        if len(data) > limit:
            return _bad_request(f"the file is larger than the limit of {limit} bytes", 413)
        try:
            suite = await asyncio.to_thread(
                parse_csv_suite,
                data,
                max_bytes=limit,
                max_cases=self.settings.csv_max_cases,
                limits=self.settings.csv_limits,
            )
        except CsvValidationError as error:
            if isinstance(judge, LlmJudge):
                await judge.aclose()
            return _bad_request("invalid CSV test suite", 422, [p.model_dump() for p in error.problems])
        options = CsvRunOptions(
            concurrency=concurrency,
            case_timeout_s=self.settings.case_timeout_s,
            max_reply_bytes=self.settings.max_reply_bytes,
        )

        async def events() -> AsyncIterator[ServerSentEvent]:
            try:
                async for name, payload in run_csv_suite(suite, agent_url, judge, options=options):
                    # one line of ASCII per event; no lone surrogates, no NaN (JSON.parse on the page refuses it)
                    yield ServerSentEvent(event=name, data=json.dumps(wire_safe(payload), default=str, allow_nan=False))
            finally:
                if isinstance(judge, LlmJudge):
                    await judge.aclose()

        return EventSourceResponse(events(), ping=15, headers={"Cache-Control": "no-store"})

    # -- page ---------------------------------------------------------------------------------------------------

    async def page_redirect(self, request: Request) -> Response:
        return RedirectResponse(url="/evaluations/", status_code=307)

    async def page(self, request: Request) -> Response:
        """The single-page UI (all behaviour in static/app.js; agent text is rendered as text, never as HTML)."""
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=_PAGE_HEADERS)

    async def page_config(self, request: Request) -> JSONResponse:
        """What the page needs to know: the default agent URL and the limits."""
        s = self.settings
        return JSONResponse(
            {
                "default_agent_url": s.default_agent_url,
                "max_bytes": s.csv_max_bytes,
                "max_cases": s.csv_max_cases,
                "case_timeout_s": s.case_timeout_s,
                "default_concurrency": s.default_concurrency,
                "max_concurrency": s.max_concurrency,
                "offline": s.judge.offline,
                "max_rows": s.csv_limits.max_rows,
                "max_columns": s.csv_limits.max_columns,
                "max_cell_chars": s.csv_limits.max_cell_chars,
                "max_expected_tools": s.csv_limits.max_expected_tools,
                "sample_available": bool(s.sample_csv and s.sample_csv.is_file()),
            }
        )

    async def sample(self, request: Request) -> Response:
        path = self.settings.sample_csv
        if path is None or not path.is_file():
            return _bad_request("no sample suite on this server", 404)
        return FileResponse(path, media_type="text/csv", filename="finance_suite.csv")
