"""The web page over HTTP: list, battle page with the Arena result views, forms, headers, offline assets."""

from __future__ import annotations

import re

from tests.battle_backend.conftest import Arena, RunningBackend, progress, result
from tests.battle_backend.sample_result import battle_result
from tests.battle_backend.views.test_rendering import unsafe


async def test_every_page_has_a_strict_content_security_policy(backend: RunningBackend) -> None:
    for path in ("/", "/static/app.js", "/battles"):
        policy = (await backend.client.get(path)).headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert "object-src 'none'" in policy


async def test_assets_are_local(backend: RunningBackend) -> None:
    page = (await backend.client.get("/")).text
    for url in re.findall(r'(?:src|href)="([^"]+)"', page):
        assert not url.startswith(("http:", "https:", "//")), url
    js = await backend.client.get("/static/app.js")
    css = await backend.client.get("/static/style.css")
    assert js.status_code == css.status_code == 200
    assert "javascript" in js.headers["content-type"] and "css" in css.headers["content-type"]
    assert "<script>" not in page.split("</head>")[1]  # no inline script in the body either


async def test_index_lists_battles_and_agents(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    page = (await arena.client.get("/")).text
    assert f'data-battle-id="{battle_id}"' in page
    assert f"/ui/battles/{battle_id}" in page
    assert green.agent_id in page and white.agent_id in page


async def test_battle_page_renders_timeline_and_arena_result(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    attack = '**bold** <script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
    await arena.post(battle_id, progress("<i>plain text</i>", markdown_content=attack, detail={"k": "<v>"}))
    await arena.post(battle_id, result("white_agent", battle_result(battle_id)))
    response = await arena.client.get(f"/ui/battles/{battle_id}")
    assert response.status_code == 200
    page = response.text
    assert "<strong>bold</strong>" in page
    assert "&lt;i&gt;plain text&lt;/i&gt;" in page
    body = page.split('<ol id="timeline"')[1]
    assert unsafe(body.replace("<svg", "<g")) == []
    assert 'id="pass-table"' in page and 'id="attempt-grid"' in page and 'class="pass-chart"' in page
    assert "[0.300, 0.900]" in page  # the pass^1 interval
    assert 'class="cell outcome-infra_error"' in page and "format_error" in page
    assert 'data-last-seq="' in page


async def test_unknown_battle_page_is_404(backend: RunningBackend) -> None:
    response = await backend.client.get("/ui/battles/nope")
    assert response.status_code == 404 and "No such battle" in response.text


async def test_register_form_registers_and_redirects(arena: Arena) -> None:
    white = await arena.agent("white")
    green_url = await arena.mount("form-green", white.fake.app)
    response = await arena.client.post(
        "/ui/agents",
        data={
            "alias": "form green",
            "agent_url": green_url,
            "launcher_url": "",
            "is_green": "true",
            "participant_requirements": "white_agent blue_agent required\nspare red_agent optional",
            "battle_timeout": "90",
        },
    )
    assert response.status_code == 303
    page = (await arena.client.get(response.headers["location"])).text
    assert "Agent form green registered" in page
    agent = next(a for a in (await arena.client.get("/agents")).json() if a["register_info"]["alias"] == "form green")
    assert agent["register_info"]["participant_requirements"] == [
        {"name": "white_agent", "role": "blue_agent", "required": True},
        {"name": "spare", "role": "red_agent", "required": False},
    ]
    assert agent["register_info"]["battle_timeout"] == 90


async def test_register_form_shows_errors(backend: RunningBackend) -> None:
    response = await backend.client.post(
        "/ui/agents", data={"alias": "x", "agent_url": "not-a-url", "launcher_url": ""}
    )
    assert response.status_code == 422
    assert "Could not register the agent" in response.text and "agent_url" in response.text


async def test_battle_form_creates_and_opens_the_battle(arena: Arena) -> None:
    green, white = await arena.pair()
    response = await arena.client.post(
        "/ui/battles",
        data={
            "green_agent_id": green.agent_id,
            "opponent_name_0": "white_agent",
            "opponent_agent_0": white.agent_id,
            "config": '{"k": 2}',
        },
    )
    assert response.status_code == 303
    battle_id = response.headers["location"].rsplit("/", 1)[1]
    assert (await arena.get(battle_id))["config"] == {"k": 2}


async def test_battle_form_reports_wrong_names(arena: Arena) -> None:
    green, white = await arena.pair()
    response = await arena.client.post(
        "/ui/battles",
        data={"green_agent_id": green.agent_id, "opponent_name_0": "nobody", "opponent_agent_0": white.agent_id},
    )
    assert response.status_code == 400
    assert "expected names: white_agent" in response.text
    bad_config = await arena.client.post(
        "/ui/battles",
        data={
            "green_agent_id": green.agent_id,
            "opponent_name_0": "white_agent",
            "opponent_agent_0": white.agent_id,
            "config": "{",
        },
    )
    assert bad_config.status_code == 422 and "config" in bad_config.text
