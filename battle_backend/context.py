"""What one running backend holds, created by the app's lifespan and reached through ``app.state.backend``."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from battle_backend.battles.runs_home import RunsHome
from battle_backend.battles.scheduler import BattleScheduler
from battle_backend.battles.service import BattleService
from battle_backend.live.hub import LiveHub
from battle_backend.settings import BackendSettings
from battle_backend.store.protocol import BattleStore
from battle_backend.views.live_feeds import LiveFeeds
from battle_backend.views.rendering import Renderer


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
    runs_home: RunsHome | None = None
    """``arena view runs/``: the runs home page's rows and comparisons (an import file's ``runs_home``)."""
