"""The green agent over MCP: control tools at /mcp/ and, in tool mode "mcp", each attempt's tau2 tools on an
endpoint of its own (/mcp-attempts/<id>/, bearer token per attempt).

    from green_agent.service.mcp import McpComponent
    app = create_app(card_url, components=[McpComponent(public_url=card_url, allowed_hosts=["green:*"])])
"""

from green_agent.service.mcp.attempt_tools import ATTEMPTS_PATH, AttemptToolGateway, mcp_tools
from green_agent.service.mcp.component import CONTROL_PATH, McpComponent
from green_agent.service.mcp.control import build_control_server
from green_agent.service.mcp.security import DEFAULT_ALLOWED_HOSTS, transport_security

__all__ = [
    "ATTEMPTS_PATH",
    "CONTROL_PATH",
    "DEFAULT_ALLOWED_HOSTS",
    "AttemptToolGateway",
    "McpComponent",
    "build_control_server",
    "mcp_tools",
    "transport_security",
]
