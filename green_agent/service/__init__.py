"""The green agent as a service: the entry points around the battle engine.

- :mod:`.a2a_server` the A2A assessment endpoint (and AgentBeats' assessment requests), operator-token checks;
- :mod:`.running_battles` the battles this process is running (limits, streams, cancellation);
- :mod:`.backend_client` live progress and results to an AgentBeats-compatible backend;
- :mod:`.mcp` the MCP control tools and per-attempt tool endpoints;
- :mod:`.main` ``arena-green`` / ``python -m green_agent``.
"""
