"""What one running backend holds, created by the app's lifespan and reached through ``app.state.backend``."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from battle_backend.live import LiveHub
from battle_backend.live_feeds import LiveFeeds
from battle_backend.rendering import Renderer
from battle_backend.scheduler import BattleScheduler
from battle_backend.service import BattleService
from battle_backend.settings import BackendSettings
from battle_backend.store import BattleStore


@dataclass(frozen=True)
class BackendContext:
    """The app's collaborators (one set per app: no module-level state)."""

    settings: BackendSettings
    store: BattleStore
    hub: LiveHub
    service: BattleService
    scheduler: BattleScheduler
    renderer: Renderer
    http: httpx.AsyncClient
    feeds: LiveFeeds
    """The shared live feeds of the SSE and WebSocket routes."""
