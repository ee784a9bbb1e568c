"""Server-side HTML: Jinja2 templates with autoescaping, markdown rendered by markdown-it-py and sanitised by nh3.

Agents control ``message``, ``detail`` and ``markdown_content``. Only markdown_content becomes markup, and only
after nh3 has removed every script, event handler, style and non-http(s) URL; the page's Content-Security-Policy
(no inline script) is the second wall. The live timeline receives the same server-rendered fragments over SSE, so
the page and its updates are produced by one renderer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nh3
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markdown_it import MarkdownIt
from markupsafe import Markup

from battle_backend.records import AgentRecord, BattleRecord, EventRecord
from battle_backend.result_views import ArenaResultView, build_result_view, find_battle_result
from battle_backend.timestamps import display_timestamp

TEMPLATES_DIR = Path(__file__).parent / "templates"
STATIC_DIR = Path(__file__).parent / "static"

_ALLOWED_TAGS = frozenset(nh3.ALLOWED_TAGS - {"map", "area"})
_ALLOWED_ATTRIBUTES: dict[str, set[str]] = {
    **{tag: set(attrs) for tag, attrs in nh3.ALLOWED_ATTRIBUTES.items() if tag in _ALLOWED_TAGS},
    "a": {"href", "title"},
    "img": {"src", "alt", "title", "width", "height"},
    "code": set(),
}


class Renderer:
    """Templates plus the sanitising markdown filter. One per app (no module-level mutable state)."""

    def __init__(self) -> None:
        self._markdown = MarkdownIt("commonmark", {"html": True, "linkify": False}).enable(["table", "strikethrough"])
        self._cleaner = nh3.Cleaner(
            tags=set(_ALLOWED_TAGS),
            attributes=_ALLOWED_ATTRIBUTES,
            url_schemes={"http", "https", "mailto"},
            link_rel="noopener noreferrer nofollow",
            strip_comments=True,
        )
        self.env = Environment(
            loader=FileSystemLoader(str(TEMPLATES_DIR)),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["markdown"] = self.markdown
        self.env.filters["pretty_json"] = pretty_json
        self.env.filters["display_time"] = display_timestamp

    def markdown(self, text: Any) -> Markup:
        """Markdown -> sanitised HTML (raw HTML in the markdown is allowed in, then cleaned like the rest)."""
        if not isinstance(text, str) or not text:
            return Markup("")
        return Markup(self._cleaner.clean(self._markdown.render(text)))

    def render(self, template: str, **context: Any) -> str:
        """Render a whole page or fragment."""
        return self.env.get_template(template).render(**context)

    def event_html(self, event: EventRecord) -> str:
        """One timeline entry (the page renders it the same way on load and over SSE)."""
        return self.render("_event.html", event=event_context(event))

    def status_html(self, battle: BattleRecord, agents: dict[str, AgentRecord]) -> str:
        """The battle header: state, participants, error."""
        return self.render("_status.html", battle=battle, agents=agents)

    def result_html(self, battle: BattleRecord) -> str:
        """The result section (empty until the battle finished)."""
        return self.render("_result.html", battle=battle, view=result_view(battle))


def pretty_json(value: Any) -> str:
    """Indented JSON as plain text (autoescaping makes it safe in <pre>)."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def event_context(event: EventRecord) -> dict[str, Any]:
    """The fields of an event a timeline entry shows, each coerced to what the template expects."""
    payload = event.payload
    message = payload.get("message")
    markdown = payload.get("markdown_content")
    detail = payload.get("detail")
    reported_by = payload.get("reported_by")
    timestamp = payload.get("timestamp")
    return {
        "seq": event.seq,
        "is_result": bool(payload.get("is_result")),
        "message": message if isinstance(message, str) else (pretty_json(message) if message is not None else ""),
        "markdown": markdown if isinstance(markdown, str) else "",
        "detail": detail,
        "has_detail": detail is not None and detail != {} and detail != [],
        "reported_by": str(reported_by) if reported_by is not None else "",
        "is_system": reported_by == "system",
        # stored as posted (ISO text or Unix seconds), shown as ISO text; 0 is a time, not a missing one
        "timestamp": display_timestamp(event.received_at if timestamp is None or timestamp == "" else timestamp),
        "winner": payload.get("winner"),
        "is_arena_result": bool(payload.get("is_result")) and find_battle_result(detail) is not None,
    }


def result_view(battle: BattleRecord) -> ArenaResultView | None:
    """The Arena views when the battle's result detail holds a BattleResult."""
    if battle.result is None:
        return None
    found = find_battle_result(battle.result.get("detail"))
    return build_result_view(found) if found is not None else None
