"""What one green-agent application holds, built once by ``create_app`` and reached through ``app.state.context``.

Everything is constructed up front, so nothing depends on start-up order: the battle registry exists (with the tool
gateway of the MCP component, when there is one) before any route or lifespan does, and the A2A executor is built
once with it. The application's lifespan only *starts* what needs a running loop (the scoring workers, the sandbox
fork server, the outbox replay) and stops it again; see :func:`green_agent.service.a2a_server.create_app`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from a2a.types import AgentCard

from green_agent.engine.attempt import ToolGateway
from green_agent.engine.config import BattleConfig
from green_agent.engine.tau.sandbox import SandboxFactory
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.service.a2a_executor import GreenAgentExecutor
from green_agent.service.agent_card import build_card
from green_agent.service.operator_auth import OperatorToken
from green_agent.service.pool_settings import PoolSettings
from green_agent.service.running_battles import BattleRegistry, ServiceLimits


@dataclass(frozen=True)
class ServiceContext:
    """The application's collaborators (one set per app: no module-level state)."""

    card: AgentCard
    operator_token: OperatorToken
    limits: ServiceLimits
    scoring: ScoringPool
    """Entered (its workers started in the background) by the lifespan."""
    sandboxes: SandboxFactory
    """Entered (its fork server warmed in the background) by the lifespan."""
    registry: BattleRegistry
    executor: GreenAgentExecutor
    pool: PoolSettings | None = None
    """This green agent's pool (``arena-green --pool``; green_agent/service/pool_service.py leases its attempts), or
    None: in no pool, every battle runs as before."""


def build_service_context(
    card_url: str,
    *,
    runs_dir: Path,
    default_config: BattleConfig,
    scoring_workers: int,
    operator_token: OperatorToken,
    limits: ServiceLimits,
    outbox_retention_s: float,
    tool_gateway: ToolGateway | None,
    pool: PoolSettings | None = None,
) -> ServiceContext:
    """Construct (without starting anything) the collaborators of one application."""
    scoring = ScoringPool(max_workers=scoring_workers, warm=False)
    sandboxes = SandboxFactory()
    registry = BattleRegistry(
        scoring=scoring,
        runs_dir=runs_dir,
        default_config=default_config,
        limits=limits,
        sandboxes=sandboxes,
        tool_gateway=tool_gateway,
        outbox_retention_s=outbox_retention_s,
        pool=pool,
    )
    return ServiceContext(
        card=build_card(card_url),
        operator_token=operator_token,
        limits=limits,
        scoring=scoring,
        sandboxes=sandboxes,
        registry=registry,
        executor=GreenAgentExecutor(registry),
        pool=pool,
    )
