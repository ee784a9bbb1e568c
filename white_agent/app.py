"""Building a reference white agent and its A2A app from plain settings (used by the CLI, tests and the launcher).

The llm and finance agents are imported only when asked for: they pull in the OpenAI client (~0.8 s of imports),
which the replay and flaky agents, started for every calibration battle and the offline demo, never use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from starlette.applications import Starlette

from white_agent.contexts import DEFAULT_IDLE_S, DEFAULT_MAX_CONTEXTS
from white_agent.errors import WhiteAgentConfigError
from white_agent.flaky import DEFAULT_NO_REPLY_S, FlakyAgent
from white_agent.replay import ReplayAgent
from white_agent.server import create_app

if TYPE_CHECKING:
    import httpx

    from white_agent.finance.agent import FinanceAgent
    from white_agent.llm import LlmAgent, LlmAgentSettings

AgentKind = Literal["llm", "replay", "flaky", "finance", "finance-llm"]
AGENT_KINDS: tuple[AgentKind, ...] = ("llm", "replay", "flaky", "finance", "finance-llm")


def make_agent(
    kind: str,
    *,
    seed: int = 0,
    fault_rates: Mapping[str, float] | None = None,
    llm: LlmAgentSettings | None = None,
    max_contexts: int = DEFAULT_MAX_CONTEXTS,
    context_idle_s: float = DEFAULT_IDLE_S,
    no_reply_s: float = DEFAULT_NO_REPLY_S,
    api_key: str | None = None,
    http_client: httpx.AsyncClient | None = None,
) -> ReplayAgent | LlmAgent | FinanceAgent:
    """The agent of ``kind``; raises :class:`WhiteAgentConfigError` for an unknown kind or bad settings.

    ``api_key`` and ``http_client`` only matter for ``llm`` (tests pass them; normally the key comes from the
    environment variable named by ``llm.api_key_env``).
    """
    if kind == "replay":
        return ReplayAgent(max_contexts=max_contexts, idle_s=context_idle_s)
    if kind == "flaky":
        return FlakyAgent(
            seed=seed, fault_rates=fault_rates, max_contexts=max_contexts, no_reply_s=no_reply_s, idle_s=context_idle_s
        )
    if kind == "llm":
        from white_agent.llm import LlmAgent, LlmAgentSettings

        settings = llm or LlmAgentSettings()
        if llm is None:
            settings = settings.model_copy(update={"max_contexts": max_contexts, "context_idle_s": context_idle_s})
        return LlmAgent(settings, api_key=api_key, http_client=http_client)
    if kind == "finance":
        from white_agent.finance.agent import FinanceAgent

        return FinanceAgent("scripted", max_contexts=max_contexts, idle_s=context_idle_s)
    if kind == "finance-llm":
        from white_agent.finance.agent import FinanceAgent, FinanceLlmSettings
        from white_agent.llm import LlmAgentSettings

        base = llm or LlmAgentSettings()
        finance = FinanceLlmSettings(
            model=base.model, base_url=base.base_url, api_key_env=base.api_key_env, temperature=base.temperature
        )
        return FinanceAgent(
            "llm",
            llm=finance,
            api_key=api_key,
            http_client=http_client,
            max_contexts=max_contexts,
            idle_s=context_idle_s,
        )
    raise WhiteAgentConfigError(f"kind: unknown agent kind {kind!r}; known kinds: {', '.join(AGENT_KINDS)}")


def create_white_agent_app(agent: ReplayAgent | LlmAgent | FinanceAgent, card_url: str) -> Starlette:
    """The A2A app serving ``agent``, announcing ``card_url`` in its card."""
    return create_app(agent, card_url=card_url, name=agent.card_name, description=agent.card_description)
