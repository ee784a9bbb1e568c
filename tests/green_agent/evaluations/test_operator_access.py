"""The evaluations surface is the operator's: /run, the CSV suite endpoints, the page and its API refuse requests
without the green agent's operator token (or with a wrong one), and the page's ``?token=`` cookie flow works in a
plain HTTP client as it does in a browser."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from green_agent.evaluations import EvaluationsSettings
from green_agent.service.operator_auth import COOKIE_NAME
from tests.green_agent.evaluations.conftest import (
    SAMPLE_CSV,
    SEED_GROQ_REQUEST,
    green_server,
    judge_settings,
    operator_client,
)
from tests.support import TEST_OPERATOR_TOKEN

pytestmark = pytest.mark.asyncio(loop_scope="module")

WRONG = "not-the-operator-token-0123456789"
CSV = SAMPLE_CSV.read_bytes()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    tmp = tmp_path_factory.mktemp("operator-access")
    async with green_server(tmp, EvaluationsSettings(judge=judge_settings(tmp, offline=True))) as base:
        yield base


def _requests() -> list[tuple[str, str, dict[str, Any]]]:
    """Every evaluations route with a request that would succeed (or get past validation) with the token."""
    return [
        ("POST", "/run", {"json": SEED_GROQ_REQUEST}),
        (
            "POST",
            "/evaluations/run",
            {"files": {"file": ("suite.csv", CSV, "text/csv")}, "data": {"agent_url": "http://127.0.0.1:9"}},
        ),
        ("GET", "/evaluations", {}),
        ("GET", "/evaluations/", {}),
        ("GET", "/evaluations/config", {}),
        ("GET", "/evaluations/sample.csv", {}),
        ("GET", "/evaluations/static/app.js", {}),
        ("GET", "/evaluations/static/app.css", {}),
        ("GET", "/evaluations/static/index.html", {}),
    ]


def _refused(response: httpx.Response) -> None:
    assert response.status_code == 401, (response.request.url, response.status_code, response.text[:200])
    assert response.headers["content-type"].startswith("application/json")
    assert "operator token" in response.json()["error"]
    assert "set-cookie" not in response.headers
    assert TEST_OPERATOR_TOKEN not in response.text


async def test_every_evaluations_route_refuses_requests_without_the_token(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for method, path, options in _requests():
            _refused(await client.request(method, path, **options))


@pytest.mark.parametrize(
    "credential",
    [
        {"headers": {"Authorization": f"Bearer {WRONG}"}},
        {"headers": {"Authorization": f"Basic {TEST_OPERATOR_TOKEN}"}},  # right secret, wrong scheme
        {"headers": {"Authorization": f"Bearer {TEST_OPERATOR_TOKEN[:-1]}"}},  # a prefix of the token
        {"headers": {"Authorization": f"Bearer {TEST_OPERATOR_TOKEN}x"}},
        {"headers": {"Cookie": f"{COOKIE_NAME}={WRONG}"}},
        {"headers": {"Cookie": f"other={TEST_OPERATOR_TOKEN}"}},  # the token under another cookie name
        {"params": {"token": WRONG}},
        {"params": {"tok": TEST_OPERATOR_TOKEN}},
    ],
    ids=[
        "bearer-wrong",
        "basic-scheme",
        "bearer-prefix",
        "bearer-suffix",
        "cookie-wrong",
        "cookie-other-name",
        "query-wrong",
        "query-other-name",
    ],
)
async def test_every_evaluations_route_refuses_a_wrong_token(url: str, credential: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=credential.get("headers")) as client:
        for method, path, options in _requests():
            _refused(await client.request(method, path, params=credential.get("params"), **options))


async def test_the_operator_token_opens_every_route(url: str) -> None:
    async with operator_client(url) as client:
        run = await client.post("/run", json=SEED_GROQ_REQUEST)
        assert run.status_code == 200 and run.json()["success"] is True
        config = await client.get("/evaluations/config")
        assert config.status_code == 200 and config.json()["max_cases"] == 100
        for path in ("/evaluations/", "/evaluations/sample.csv", "/evaluations/static/app.js"):
            assert (await client.get(path)).status_code == 200, path
        redirect = await client.get("/evaluations")
        assert redirect.status_code == 307 and redirect.headers["location"] == "/evaluations/"
        async with client.stream(
            "POST",
            "/evaluations/run",
            files={"file": ("suite.csv", CSV, "text/csv")},
            data={"agent_url": "http://127.0.0.1:9"},
        ) as stream:
            assert stream.status_code == 200
            assert "cannot run the suite" in (await stream.aread()).decode()
    async with httpx.AsyncClient(base_url=url, timeout=30) as anonymous:  # liveness and the card stay open
        assert (await anonymous.get("/health")).status_code == 200
        assert (await anonymous.get("/.well-known/agent-card.json")).status_code == 200


async def test_query_token_sets_a_strict_httponly_cookie_that_authenticates(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as browser:
        page = await browser.get("/evaluations/", params={"token": TEST_OPERATOR_TOKEN})
        assert page.status_code == 200 and "<title>Arena" in page.text
        cookie = page.headers["set-cookie"]
        attributes = {part.strip().split("=", 1)[0].lower() for part in cookie.split(";")}
        assert cookie.startswith(f"{COOKIE_NAME}={TEST_OPERATOR_TOKEN};")
        assert {"httponly", "samesite", "path"} <= attributes and "samesite=strict" in cookie.lower()
        assert browser.cookies.get(COOKIE_NAME) == TEST_OPERATOR_TOKEN

        # what the page's JavaScript then does, with the cookie only (no header, no query)
        for path in (
            "/evaluations/static/app.js",
            "/evaluations/static/app.css",
            "/evaluations/config",
            "/evaluations/sample.csv",
        ):
            response = await browser.get(path)
            assert response.status_code == 200, path
            assert "set-cookie" not in response.headers  # only a ?token= request sets it
        async with browser.stream(
            "POST",
            "/evaluations/run",
            files={"file": ("suite.csv", CSV, "text/csv")},
            data={"agent_url": "http://127.0.0.1:9"},
        ) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
        assert (await browser.post("/run", json=SEED_GROQ_REQUEST)).status_code == 200

        # the cookie is the credential: without it the same client is refused again
        browser.cookies.clear()
        _refused(await browser.get("/evaluations/config"))

    async with httpx.AsyncClient(base_url=url, timeout=30) as other:
        wrong = await other.get("/evaluations/", params={"token": WRONG})
        _refused(wrong)
        assert not other.cookies


async def test_page_scripts_rely_on_same_origin_requests_only() -> None:
    """The cookie reaches the page's requests because they are same-origin relative fetches (credentials
    "same-origin" by default) and the assets are same-origin URLs; the page drops ?token= from the address bar."""
    script = (Path(__file__).resolve().parents[3] / "green_agent" / "evaluations" / "static" / "app.js").read_text()
    fetched = [
        line.split("fetch(", 1)[1].split(",")[0].split(")")[0].strip()
        for line in script.splitlines()
        if "fetch(" in line
    ]
    assert fetched and all(target.startswith('"/evaluations/') for target in fetched), fetched
    assert 'credentials: "omit"' not in script
    assert "history.replaceState" in script
