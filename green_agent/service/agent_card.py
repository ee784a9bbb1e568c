"""The green agent's A2A agent card: what it announces at ``/.well-known/agent-card.json`` (and the legacy path)."""

from __future__ import annotations

from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill


def build_card(url: str) -> AgentCard:
    """The green agent's card, advertising JSON-RPC at ``url`` for protocol 1.0 and 0.3."""
    return AgentCard(
        name="arena-green-agent",
        description="Arena tau-bench reliability assessor: pass^k / pass@k with confidence intervals over k "
        "fresh-context attempts per task, with a failure breakdown.",
        version="0.1.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(
                id="tau_bench_pass_k",
                name="tau-bench pass^k assessment",
                description="Runs tau2 retail/airline/telecom/mock tasks k times against a white agent over A2A.",
                tags=["assessment", "tau-bench", "pass^k", "agentbeats"],
                examples=['{"participants": {"white_agent": "http://127.0.0.1:9004"}, "config": {"k": 4}}'],
            )
        ],
    )
