#!/usr/bin/env bash
# Regenerate the pictures under docs/screenshots on purpose: the browser tests save their screenshots there only when
# ARENA_SCREENSHOT_DIR names it (otherwise into each test's temporary folder, so `pytest` leaves the checkout clean).
# Usage: scripts/update_screenshots.sh   (from the repository root; needs .venv and Debian's chromium)
set -euo pipefail
cd "$(dirname "$0")/.."
export ARENA_SCREENSHOT_DIR="$PWD/docs/screenshots"
mkdir -p "$ARENA_SCREENSHOT_DIR"
.venv/bin/python -m pytest -q -p no:cacheprovider -m browser \
  tests/launcher/test_browser_demo.py tests/green_agent/evaluations/test_browser_page.py tests/battle_backend/views "$@"
git status --short docs/screenshots
