"""The green service's context: built whole by create_app, frozen, one per app, with the tool gateway in the registry
from the start (no start-up order to get right, no executor re-created per request)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from green_agent.service.a2a_executor import GreenAgentExecutor
from green_agent.service.a2a_server import create_app
from green_agent.service.context import ServiceContext
from green_agent.service.mcp.component import McpComponent
from green_agent.service.pool_settings import PoolSettings


def test_the_mcp_components_gateway_is_in_the_registry_before_anything_starts(tmp_path: Path) -> None:
    component = McpComponent(public_url="http://127.0.0.1:9")
    app = create_app("http://127.0.0.1:9", runs_dir=tmp_path, components=[component])
    context: ServiceContext = app.state.context
    assert component.gateway is not None
    assert context.registry.tool_gateway is component.gateway
    assert app.state.registry is context.registry


def test_without_a_public_url_there_is_no_gateway(tmp_path: Path) -> None:
    app = create_app("http://127.0.0.1:9", runs_dir=tmp_path, components=[McpComponent()])
    assert app.state.context.registry.tool_gateway is None


def test_the_context_is_frozen_and_its_executor_serves_its_registry(tmp_path: Path) -> None:
    context: ServiceContext = create_app("http://127.0.0.1:9", runs_dir=tmp_path).state.context
    assert isinstance(context.executor, GreenAgentExecutor)
    assert context.executor.registry is context.registry
    assert context.registry.scoring is context.scoring and context.registry.sandboxes is context.sandboxes
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.registry = context.registry  # type: ignore[misc]


def test_two_apps_share_nothing(tmp_path: Path) -> None:
    def pool() -> PoolSettings:  # each app's own (the field is None without --pool)
        return PoolSettings(name="p", backend_url="http://127.0.0.1:9", key="k", worker_id="w")

    first = create_app("http://127.0.0.1:9", runs_dir=tmp_path, pool=pool()).state.context
    second = create_app("http://127.0.0.1:9", runs_dir=tmp_path, pool=pool()).state.context
    for field in dataclasses.fields(ServiceContext):
        if field.name != "card":
            assert getattr(first, field.name) is not getattr(second, field.name), field.name


def test_two_components_with_a_gateway_are_refused(tmp_path: Path) -> None:
    components = [McpComponent(public_url="http://127.0.0.1:9"), McpComponent(public_url="http://127.0.0.1:9")]
    with pytest.raises(ValueError, match="components: 2 of them provide a tool gateway"):
        create_app("http://127.0.0.1:9", runs_dir=tmp_path, components=components)


async def test_an_app_serves_once(tmp_path: Path) -> None:
    """The context's pools close with the first lifespan: a second one is refused, not left to fail every score."""
    app = create_app("http://127.0.0.1:9", runs_dir=tmp_path, scoring_workers=1)
    async with app.router.lifespan_context(app):
        pass
    with pytest.raises(RuntimeError, match="serves once"):
        async with app.router.lifespan_context(app):
            pass
