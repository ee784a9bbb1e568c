"""Server-side rendering: sanitised markdown (no agent script can run), the Arena result views and the SVG."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from battle_backend.battles.arena_results import find_battle_result
from battle_backend.views.rendering import Renderer
from battle_backend.views.results import build_result_view, pass_chart_svg
from tests.battle_backend.sample_result import battle_result

ATTACKS = [
    "<script>window.__pwned = 1</script>",
    '<img src=x onerror="window.__pwned = 2">',
    '<a href="javascript:window.__pwned=3">click</a>',
    '<iframe src="http://127.0.0.1:1/"></iframe>',
    '<div style="background:url(javascript:alert(1))" onclick="x()">d</div>',
    "<svg><script>alert(1)</script></svg>",
    '<object data="x"></object>',
    "[link](javascript:alert(1))",
    '![img](x" onerror="alert(1))',
    "<scr<script>ipt>alert(1)</script>",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
]
FORBIDDEN_TAGS = {"script", "iframe", "object", "embed", "style", "link", "meta", "base", "form", "svg", "math"}


class _Audit(HTMLParser):
    """Collects every way an HTML fragment could run code: forbidden tags, event-handler or style attributes,
    URLs with a scheme other than http(s)/mailto."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in FORBIDDEN_TAGS:
            self.problems.append(f"tag {tag}")
        for name, value in attrs:
            if name.startswith("on") or name == "style":
                self.problems.append(f"attribute {name} on {tag}")
            if name in ("href", "src", "action", "formaction", "xlink:href") and value:
                scheme = re.match(r"\s*([a-zA-Z][a-zA-Z0-9+.-]*):", value)
                if scheme and scheme.group(1).lower() not in ("http", "https", "mailto"):
                    self.problems.append(f"{name}={value!r}")


def unsafe(html: str) -> list[str]:
    """Problems found in ``html`` (empty when nothing in it can execute)."""
    audit = _Audit()
    audit.feed(html)
    audit.close()
    return audit.problems


def test_markdown_is_rendered() -> None:
    html = str(Renderer().markdown("# Title\n\n**bold** and `code`\n\n| a | b |\n|---|---|\n| 1 | 2 |"))
    assert "<h1>Title</h1>" in html and "<strong>bold</strong>" in html and "<code>code</code>" in html
    assert "<table>" in html


def test_every_known_attack_is_neutralised() -> None:
    renderer = Renderer()
    for attack in ATTACKS:
        html = str(renderer.markdown(f"before\n\n{attack}\n\nafter"))
        assert unsafe(html) == [], (attack, html)
        assert "before" in html  # (an unclosed <style> may swallow what follows: safe)


def test_links_keep_safe_urls_only() -> None:
    html = str(Renderer().markdown("[ok](https://example.org/x) [bad](javascript:alert(1))"))
    assert 'href="https://example.org/x"' in html
    assert unsafe(html) == []  # the javascript: link stays visible as text, never as a link
    assert html.count("<a ") == 1
    assert 'rel="noopener noreferrer nofollow"' in html


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=40), st.sampled_from(ATTACKS)), max_size=8))
def test_no_input_yields_script_or_handlers(pieces: list[str]) -> None:
    html = str(Renderer().markdown("".join(pieces)))
    assert unsafe(html) == [], html


def test_timeline_entry_escapes_message_and_detail() -> None:
    from battle_backend.store.records import EventRecord

    event = EventRecord(
        battle_id="b",
        seq=7,
        received_at="t",
        payload={
            "is_result": False,
            "message": "<b>not bold</b>",
            "detail": {"x": "<script>1</script>"},
            "reported_by": "<i>w</i>",
        },
    )
    html = Renderer().event_html(event)
    assert "&lt;b&gt;not bold&lt;/b&gt;" in html
    assert "&lt;script&gt;" in html and "<script" not in html
    assert "&lt;i&gt;w&lt;/i&gt;" in html
    assert '<details class="event-detail">' in html and 'id="event-7"' in html


def test_result_view_table_and_grid() -> None:
    view = build_result_view(battle_result())
    assert [row.j for row in view.rows] == [1, 2, 3]
    assert view.rows[0].coverage_text == "2 / 2"
    assert view.max_attempt == 3
    assert [row.task_key for row in view.grid] == ["retail/test/0", "retail/test/1"]
    first, second = view.grid
    assert [c.outcome for c in first.cells if c] == ["success", "failure", "success"]
    assert second.cells[0] is not None and second.cells[0].label == "format_error"
    assert second.cells[1] is not None and second.cells[1].outcome == "infra_error"
    assert "user_simulator" in second.cells[1].title
    assert view.outcome_counts == {"success": 3, "failure": 2, "infra_error": 1}


def test_chart_has_points_and_whiskers_for_defined_rows_only() -> None:
    svg = build_result_view(battle_result()).chart_svg
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count('class="point-pass-hat"') == 2  # j=3 is undefined (too few attempts)
    assert svg.count('class="whisker-pass-hat"') == 2 * 3
    assert "<script" not in svg and "style=" not in svg


def test_chart_without_rows() -> None:
    assert "no summary rows" in pass_chart_svg([])


def test_battle_result_is_found_at_top_level_or_one_level_down() -> None:
    data = battle_result()
    assert find_battle_result(data) is data
    assert find_battle_result({"battle_result": data}) is data
    assert find_battle_result({"score": 1}) is None
    assert find_battle_result("text") is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(
    attempts=st.lists(
        st.dictionaries(st.sampled_from(["outcome", "attempt", "task_index", "domain", "failure", "task_key"]), JSON),
        max_size=6,
    ),
    macro=st.one_of(
        JSON,
        st.lists(
            st.dictionaries(
                st.sampled_from(["j", "pass_hat_mean", "pass_hat_ci_low", "pass_hat_ci_high", "coverage"]), JSON
            ),
            max_size=4,
        ),
    ),
)
def test_odd_results_never_crash_the_views(attempts: list[dict[str, Any]], macro: Any) -> None:
    view = build_result_view({"attempts": attempts, "summary": {"macro": macro}})
    assert view.chart_svg.startswith("<svg")
    html = Renderer().render("_result.html", battle=_FinishedBattle(), view=view)
    assert [p for p in unsafe(html) if not p.startswith("tag svg")] == []


class _FinishedBattle:
    """The attributes _result.html reads from a battle."""

    def __init__(self) -> None:
        self.battle_id = "b-1"
        self.result = {"winner": "draw", "finish_time": "t"}
