#!/usr/bin/env bash
# Build (or reuse) the separate virtual environment that holds the REAL AgentBeats backend (PyPI agentbeats==1.2.6).
#
# Why a venv of its own: the AgentBeats backend imports the a2a-sdk 0.3 client, which a2a-sdk 1.x (Arena's own
# dependency) removed. The interop test (tests/interop/test_real_agentbeats.py) starts the backend from here.
#
# Usage: scripts/agentbeats_venv.sh            -> .venv-agentbeats (or $ARENA_AGENTBEATS_VENV)
# Idempotent: a venv whose imports already work is left alone; a half-built one is completed.
# Exit codes: 0 ready, 1 the venv could not be built (e.g. no network to PyPI).
set -euo pipefail
trap 'echo "agentbeats_venv.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."

VENV="${ARENA_AGENTBEATS_VENV:-.venv-agentbeats}"
PYTHON="${PYTHON:-python3}"
PINS=("agentbeats==1.2.6" "a2a-sdk[http-server]<0.4")
STAMP="$VENV/.arena-agentbeats-ready"

# Importing backend.app would create its SQLite file inside site-packages: check the pieces it needs instead.
check() {
  "$VENV/bin/python" - <<'PY' >/dev/null 2>&1
import importlib.metadata as md
import importlib.util
assert md.version("agentbeats") == "1.2.6", md.version("agentbeats")
assert md.version("a2a-sdk").startswith("0."), md.version("a2a-sdk")
import a2a.client, fastapi, uvicorn, agentbeats.utils.agents, agents, supabase, dotenv  # noqa: F401,E401
assert importlib.util.find_spec("backend.app") is not None
PY
}

if [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ] && check; then
  echo "agentbeats venv ready: $VENV"
  exit 0
fi

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  "$PYTHON" -m venv --clear "$VENV"  # new, or left without pip by an interrupted build
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}"
if ! check; then
  echo "agentbeats venv at $VENV is installed but its imports fail:" >&2
  "$VENV/bin/python" -c "import a2a.client, fastapi, uvicorn, agentbeats.utils.agents, agents, supabase, dotenv" >&2 || true
  exit 1
fi
touch "$STAMP"
echo "agentbeats venv ready: $VENV"
