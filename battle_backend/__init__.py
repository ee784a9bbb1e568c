"""Arena's battle backend: the AgentBeats battle API with a SQLite store, concurrent battles, live updates and a
web page. Imports nothing from green_agent, white_agent or launcher, so any AgentBeats agent can use it.

    from battle_backend import BackendSettings, create_app
"""

from battle_backend.app import create_app
from battle_backend.settings import BackendSettings

__all__ = ["BackendSettings", "create_app"]
