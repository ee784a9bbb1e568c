"""Server-side HTML: Jinja2 templates with autoescaping, markdown rendered by markdown-it-py and sanitised by nh3.

Agents control ``message``, ``detail`` and ``markdown_content``. Only markdown_content becomes markup, and only
after nh3 has removed every script, event handler, style and non-http(s) URL; the page's Content-Security-Policy
(no inline script) is the second wall. The live timeline receives the same server-rendered fragments over SSE, so
the page and its updates are produced by one renderer.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import nh3
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markdown_it import MarkdownIt
from markupsafe import Markup

from battle_backend.battles.arena_results import find_battle_result
from battle_backend.battles.facts import BattleFacts, battle_facts
from battle_backend.store.records import AgentRecord, BattleRecord, EventRecord
from battle_backend.store.timestamps import display_timestamp
from battle_backend.views.attempt_data import attempt_path, finished_event_detail
from battle_backend.views.attempt_filter import AttemptFilter
from battle_backend.views.battle_score import battle_score
from battle_backend.views.divergence import consistency_box, task_path
from battle_backend.views.event_icons import event_icon
from battle_backend.views.progress import LiveProgress
from battle_backend.views.results import ArenaResultView, build_result_view
from battle_backend.views.trajectory import raw_messages

TEMPLATES_DIR = Path(__file__).parents[1] / "templates"
STATIC_DIR = Path(__file__).parents[1] / "static"

_ALLOWED_TAGS = frozenset(nh3.ALLOWED_TAGS - {"map", "area"})
_ALLOWED_ATTRIBUTES: dict[str, set[str]] = {
    **{tag: set(attrs) for tag, attrs in nh3.ALLOWED_ATTRIBUTES.items() if tag in _ALLOWED_TAGS},
    "a": {"href", "title"},
    "img": {"src", "alt", "title", "width", "height"},
    "code": set(),
}


EVENT_HTML_CACHE = 4096
"""Timeline entries kept rendered: a stored event never changes, and every open page of a battle shows the same ones."""


class Renderer:
    """Templates plus the sanitising markdown filter. One per app (no module-level mutable state). Thread-safe:
    the live feeds render in worker threads."""

    def __init__(self) -> None:
        self._event_cache: OrderedDict[tuple[str, int], str] = OrderedDict()
        self._event_cache_lock = threading.Lock()
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
        self.env.filters["attempt_url"] = attempt_path
        self.env.filters["task_url"] = task_path  # the divergence view (views/divergence.py)
        self.env.globals["consistency_box"] = consistency_box
        self.env.filters["battle_score"] = battle_score
        # what a fragment rendered without them assumes: no filter, no calibration, no winner rule
        self.env.globals["no_filter"] = AttemptFilter()
        self.env.globals["no_facts"] = BattleFacts()

    def markdown(self, text: Any) -> Markup:
        """Markdown -> sanitised HTML (raw HTML in the markdown is allowed in, then cleaned like the rest)."""
        if not isinstance(text, str) or not text:
            return Markup("")
        return Markup(self._cleaner.clean(self._markdown.render(text)))

    def render(self, template: str, **context: Any) -> str:
        """Render a whole page or fragment."""
        return self.env.get_template(template).render(**context)

    def event_html(self, event: EventRecord) -> str:
        """One timeline entry (the page renders it the same way on load and over SSE), rendered once per event:
        a stored event is immutable, so (battle, seq) names its HTML for good."""
        key = (event.battle_id, event.seq)
        with self._event_cache_lock:
            cached = self._event_cache.get(key)
            if cached is not None:
                self._event_cache.move_to_end(key)
                return cached
        html = self.render("_event.html", event=event_context(event))
        with self._event_cache_lock:
            self._event_cache[key] = html
            if len(self._event_cache) > EVENT_HTML_CACHE:
                self._event_cache.popitem(last=False)
        return html

    def status_html(
        self, battle: BattleRecord, agents: dict[str, AgentRecord], *, started_calibration: bool = False
    ) -> str:
        """The battle header: state, winner with its rule, calibration banner, participants, error."""
        facts = battle_facts(battle, started_calibration=started_calibration)
        return self.render("_status.html", battle=battle, agents=agents, facts=facts)

    def result_html(
        self,
        battle: BattleRecord,
        *,
        started_calibration: bool = False,
        attempt_filter: AttemptFilter | None = None,
    ) -> str:
        """The result section (empty until the battle finished); ``attempt_filter`` hides grid cells server-side."""
        return self.render(
            "_result.html",
            battle=battle,
            view=result_view(battle),
            facts=battle_facts(battle, started_calibration=started_calibration),
            flt=attempt_filter or AttemptFilter(),
        )

    def progress_html(
        self, battle: BattleRecord, progress: LiveProgress, *, attempt_filter: AttemptFilter | None = None
    ) -> str:
        """The live progress box: counters, running pass^1, ETA and the live grid; empty once the result's own
        views (final pass^k, final grid) supersede it. A battle without them (an interrupted run, a foreign result)
        keeps the box."""
        view = result_view(battle)
        if view is not None and view.grid:
            return ""
        return self.render(
            "_progress.html",
            battle_id=battle.battle_id,
            progress=progress,
            flt=attempt_filter or AttemptFilter(),
        )


def pretty_json(value: Any) -> str:
    """Indented JSON as plain text (autoescaping makes it safe in <pre>)."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def timeline_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """An event as the timeline shows it and the SSE stream sends it: an ``attempt_finished`` detail's trajectory
    (up to 256 KB, for the attempt viewer) is replaced by a stub that says where the conversation is."""
    detail = payload.get("detail")
    if not isinstance(detail, dict) or not isinstance(detail.get("trajectory"), dict):
        return payload
    trajectory = detail["trajectory"]
    stub = {
        "messages": len(raw_messages(trajectory)),
        "note": "the conversation is shown in the attempt viewer (and its raw JSONL)",
    }
    return {**payload, "detail": {**detail, "trajectory": stub}}


def event_context(event: EventRecord) -> dict[str, Any]:
    """The fields of an event a timeline entry shows, each coerced to what the template expects. An unverified
    event (posted without the battle's token) is marked as such, is never shown as the backend's own (``system``)
    and links to no attempt: the attempt viewer shows only the battle's verified attempts."""
    payload = timeline_payload(event.public_payload())
    message = payload.get("message")
    markdown = payload.get("markdown_content")
    detail = payload.get("detail")
    keyed = finished_event_detail(payload)
    reported_by = payload.get("reported_by")
    timestamp = payload.get("timestamp")
    text = message if isinstance(message, str) else (pretty_json(message) if message is not None else "")
    icon, text = event_icon(detail, text, verified=event.verified)  # text labels, not emoji (views/event_icons.py)
    return {
        "seq": event.seq,
        "is_result": bool(payload.get("is_result")),
        "message": text,
        "icon": icon,
        "markdown": markdown if isinstance(markdown, str) else "",
        "detail": detail,
        "has_detail": detail is not None and detail != {} and detail != [],
        "reported_by": str(reported_by) if reported_by is not None else "",
        "is_system": reported_by == "system" and event.verified,
        "unverified": not event.verified,
        # stored as posted (ISO text or Unix seconds), shown as ISO text; 0 is a time, not a missing one
        "timestamp": display_timestamp(event.received_at if timestamp is None or timestamp == "" else timestamp),
        "winner": payload.get("winner"),
        "is_arena_result": bool(payload.get("is_result")) and find_battle_result(detail) is not None,
        "attempt_url": attempt_path(event.battle_id, *keyed[0]) if keyed is not None and event.verified else None,
    }


def result_view(battle: BattleRecord) -> ArenaResultView | None:
    """The Arena views when the battle's result detail holds a BattleResult."""
    if battle.result is None:
        return None
    found = find_battle_result(battle.result.get("detail"))
    return build_result_view(found) if found is not None else None
