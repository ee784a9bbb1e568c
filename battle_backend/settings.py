"""The backend's configuration: one validated model passed down explicitly (no process-wide state).

Defaults follow the AgentBeats backend (120 s to get ready, 5 s poll, 300 s battle timeout) so that agents written
for it behave the same here; tests and `arena run` shorten them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_DB_PATH = Path("arena_backend.sqlite3")


class BackendSettings(BaseModel):
    """Everything `create_app` needs; every field has a safe default."""

    model_config = ConfigDict(frozen=True)

    db_path: Path = DEFAULT_DB_PATH
    """SQLite file (WAL mode). Created with its schema on first start. Ignored when ``db_url`` is set."""
    db_url: str | None = None
    """A PostgreSQL database (``postgresql://user@host:port/dbname``) instead of the SQLite file: several replicas
    may share it. The password is best left out of the URL (libpq reads ``PGPASSWORD``); it is never logged."""
    db_pool_size: int = Field(default=10, ge=1, le=200)
    """PostgreSQL: connections this replica may hold at most (plus one for LISTEN)."""
    db_wait_s: float = Field(default=5.0, gt=0, le=120.0)
    """PostgreSQL: how long a request waits for a pooled connection before it is answered 503 with Retry-After
    (0.5 s while the database is known to be down). The pool's own default, 30 s, held every request of an outage."""
    replica_lease_s: float = Field(default=15.0, ge=1.0, le=3600.0)
    """PostgreSQL: a replica renews its lease every third of this; when it has not for this long (it died, or lost
    the database), another replica takes over its running battles (re-arms their timeouts; a battle it was still
    setting up fails with a reason)."""
    public_url: str | None = None
    """The URL agents use to reach this backend (sent as ``backend_url``). When unset, the base URL of the
    ``POST /battles`` request that created the battle is used, which is right whenever agents and the battle's
    creator reach the backend the same way (the local case)."""
    max_concurrent_battles: int = Field(default=4, ge=1, le=256)
    """Battles in state running at once; more wait in the queue (AgentBeats runs one)."""
    ready_timeout_s: float = Field(default=120.0, gt=0)
    """How long to wait for every agent's launcher to report ``PUT /agents/{id} {"ready": true}``."""
    ready_poll_interval_s: float = Field(default=5.0, gt=0)
    """Fallback poll of the ready flags; a ready report also wakes the waiter at once."""
    battle_timeout_default_s: float = Field(default=300.0, gt=0)
    """Used when the green agent registered no ``battle_timeout``. On expiry the battle finishes as a draw."""
    start_delay_s: float = Field(default=0.0, ge=0)
    """Pause between battle_info and battle_start. AgentBeats sleeps 5 s here; battle_info already proves the
    agents answer, so the default is no pause."""
    green_ack_timeout_s: float = Field(default=5.0, gt=0)
    """How long to wait for the green agent's first answer on the battle_start stream before logging that it is
    late. A late green agent is never marked errored: its later reports are accepted until the battle timeout."""
    a2a_timeout_s: float = Field(default=30.0, gt=0)
    """Read timeout for a battle_info answer. A timeout is logged as a warning, not an error."""
    http_timeout_s: float = Field(default=10.0, gt=0)
    """Timeout for agent-card fetches and launcher calls."""
    require_token: bool = False
    """When on, every event and result (``POST /battles/{id}``, the MCP report tools) needs the battle's token
    (``X-Battle-Token`` or ``Authorization: Bearer``), which only the green agent receives. Off by default because
    AgentBeats agents do not send one; a token that *is* presented is checked either way (a wrong one is a 401)."""
    max_request_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Byte cap of every request body except battle events: agent registration, ready reports, battle creation,
    the launcher check and the web forms. Enforced while the body is read (chunked bodies too): 413."""
    max_event_bytes: int = Field(default=256 * 1024, ge=1024)
    """Byte cap of one progress event (``is_result`` false), over HTTP or MCP: 413 naming this setting."""
    max_result_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """Byte cap of one result event (a result carries the whole battle) and so of any ``POST /battles/{id}`` body
    and any MCP message: 413 naming this setting."""
    max_json_depth: int = Field(default=64, ge=2, le=512)
    """Deepest nesting of objects and arrays accepted in any JSON body (and agent card): 400 beyond."""
    max_json_int_digits: int = Field(default=64, ge=20, le=4000)
    """Longest integer (in decimal digits) accepted in any JSON body: 400 beyond. Python refuses to convert
    integers of more than 4300 digits, and no field needs more than a 64-bit value."""
    sse_ping_interval_s: float = Field(default=15.0, gt=0)
    """Keep-alive interval of the server-sent-events stream."""
    sqlite_synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    """SQLite's fsync policy (WAL mode). NORMAL: a commit (and so every accepted event) survives a crash or kill of
    the backend process; FULL: it also survives an OS crash or power cut, at the price of one fsync per group
    commit."""
    live_send_timeout_s: float = Field(default=30.0, gt=0)
    """A live view (SSE stream, list WebSocket) whose client does not take one message within this time is
    disconnected: a stuck browser must not hold a connection and its buffers for ever (it reconnects and resumes)."""
    mcp_allowed_hosts: tuple[str, ...] = ()
    """Host header values the MCP endpoints (``/mcp/``, ``/sse``) accept besides loopback on any port and the host
    of ``public_url``: ``name:port``, ``name:*`` (any port) or a bare ``name``. DNS-rebinding protection stays on;
    containers add the name other containers use, e.g. ``backend:*``."""
    talk_to_agent_timeout_s: float = Field(default=120.0, gt=0)
    """How long the MCP tool talk_to_agent waits for the agent's whole answer (AgentBeats allows 120 s)."""

    @field_validator("mcp_allowed_hosts")
    @classmethod
    def _check_hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """A Host header value has no scheme, path or spaces; catching that here beats a silent 421 later."""
        cleaned = tuple(host.strip() for host in value)
        for host in cleaned:
            if not host or any(c in host for c in " /\\"):
                raise ValueError(f"mcp_allowed_hosts: {host!r} is not a Host header value (name, name:port, name:*)")
        return cleaned

    @model_validator(mode="after")
    def _result_cap_covers_events(self) -> BackendSettings:
        """``POST /battles/{id}`` is read up to max_result_bytes before its kind is known."""
        if self.max_result_bytes < self.max_event_bytes:
            raise ValueError("max_result_bytes must be at least max_event_bytes (a result carries the whole battle)")
        return self

    @field_validator("db_url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        """Only PostgreSQL URLs: a SQLite file is ``db_path``."""
        if value is None:
            return None
        value = value.strip()
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("db_url must be a postgresql:// URL (a SQLite file goes in db_path)")
        return value

    @field_validator("public_url")
    @classmethod
    def _strip_trailing_slash(cls, value: str | None) -> str | None:
        """Agents append paths to backend_url; a trailing slash would double it."""
        if value is None:
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError("public_url must start with http:// or https://")
        return value
