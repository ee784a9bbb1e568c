"""The green agent as a service: the entry points around the battle engine.

- :mod:`.a2a_server` the application (A2A endpoint, agent card, /health, components), built from one
  :mod:`.context` (the frozen :class:`~.context.ServiceContext`);
- :mod:`.a2a_executor` what the A2A endpoint does with AgentBeats battles and assessment requests
  (:mod:`.a2a_messages` reads them), :mod:`.a2a_auth` the operator-token checks per A2A method;
- :mod:`.running_battles` the battles this process is running (limits, streams, cancellation);
- :mod:`.backend_client` live progress and results to an AgentBeats-compatible backend;
- :mod:`.mcp` the MCP control tools and per-attempt tool endpoints;
- :mod:`.main` ``arena-green`` / ``python -m green_agent``.
"""
