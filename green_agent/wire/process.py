"""Names the green agent and the processes around it (the launcher, an operator's shell) agree on.

Why here: the launcher starts the green agent and reads what it leaves in a run directory, so both sides must use
the same environment variable and file names; keeping them in the wire package lets the launcher use them without
importing the service's internals.
"""

from __future__ import annotations

from typing import Final

TOKEN_ENV: Final = "ARENA_OPERATOR_TOKEN"
"""Environment variable the green agent reads its operator token from (when no flag gives one)."""
OUTBOX_FILE: Final = "outbox.jsonl"
"""The backend poster's durable outbox in a battle's run directory (``runs/<id>/outbox.jsonl``)."""
DEFAULT_RETENTION_S: Final = 3600.0
"""How long an undelivered event is kept trying, counted from when it was reported (``--outbox-retention``)."""
