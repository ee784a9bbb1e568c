"""The runs home (GET /ui/runs) and compare view (GET /ui/runs/compare) over HTTP, from a folder of runs imported
as ``arena view runs/`` imports it, and the battle list's score column in normal backend mode."""

from __future__ import annotations

import html
import json
import re
import shlex
from pathlib import Path

from battle_backend.battles.runs_home import HomeRun
from battle_backend.views.runs_home import CompareView
from launcher.cli.compare_command import build_report, read_local_run
from tests.battle_backend.conftest import Arena, RunningBackend, result
from tests.battle_backend.sample_result import battle_result
from tests.support.run_folders import get_text, sample_folder, serve_home


def row_ids(page: str) -> list[str]:
    table = page.split('id="runs-table"')[1].split("</table>")[0]
    return re.findall(r'<tr data-battle-id="([^"]+)"', table)


async def test_the_home_lists_every_run_and_filters_and_sorts_server_side(tmp_path: Path) -> None:
    sample_folder(tmp_path / "runs")
    async with serve_home(tmp_path / "runs", tmp_path) as (url, _):
        status, page = await get_text(f"{url}/ui/runs")
        assert status == 200
        assert row_ids(page) == ["retail-new-tau2", "retail-v2", "retail-v1", "airline-a"]  # date, newest first
        v2 = page.split('data-battle-id="retail-v2"')[1].split("</tr>")[0]
        assert "0.900" in v2 and "[0.73, 0.98]" in v2 and ">30<" in v2 and ">4<" in v2  # score, interval, tasks, k
        assert "task_incomplete 12" in v2 and "finished" in v2 and "2026-11-21 09:00" in v2
        assert re.search(r">[0-9a-f]{10}<", v2)  # the short fingerprint
        assert 'href="/ui/battles/retail-v2"' in v2
        _, page = await get_text(f"{url}/ui/runs?sort=score")
        assert row_ids(page) == ["retail-v2", "retail-new-tau2", "airline-a", "retail-v1"]
        _, page = await get_text(f"{url}/ui/runs?sort=name")
        assert row_ids(page) == ["airline-a", "retail-new-tau2", "retail-v1", "retail-v2"]
        _, page = await get_text(f"{url}/ui/runs?domain=airline")
        assert row_ids(page) == ["airline-a"]
        _, page = await get_text(f"{url}/ui/runs?q=V1&status=finished")
        assert row_ids(page) == ["retail-v1"]
        _, page = await get_text(f"{url}/ui/runs?status=running&sort=nonsense")
        assert row_ids(page) == [] and "No run matches the filter" in page


async def test_the_compare_view_shows_arena_compare_s_numbers(tmp_path: Path) -> None:
    paths = sample_folder(tmp_path / "runs")
    expected = build_report(
        read_local_run(paths["retail-v2"]),
        read_local_run(paths["retail-v1"]),
        sources=(str(paths["retail-v2"]), str(paths["retail-v1"])),
    )
    async with serve_home(tmp_path / "runs", tmp_path) as (url, _):
        for order in ("run=retail-v1&run=retail-v2", "run=retail-v2&run=retail-v1"):
            status, page = await get_text(f"{url}/ui/runs/compare?{order}")
            assert status == 200
            text = html.unescape(page)
            assert expected.verdict.text in text
            assert f"arena compare {paths['retail-v2']} {paths['retail-v1']}" in text  # A: the newer run
            per_j = text.split('id="compare-per-j"')[1].split("</table>")[0]
            for stat in expected.comparison.per_j:
                low, high = stat.pass_hat_diff_ci_low, stat.pass_hat_diff_ci_high
                assert low is not None and high is not None
                assert f"[{low:+.3f}, {high:+.3f}]" in per_j
            assert len(expected.flips.better_in_a) == 18 and "better in A: 18 task(s)" in text


async def test_incomparable_and_unfinished_pairs_carry_arena_compare_s_refusal(tmp_path: Path) -> None:
    paths = sample_folder(tmp_path / "runs")
    unfinished = tmp_path / "runs" / "retail-v1-running"
    unfinished.mkdir()
    (unfinished / "attempts.jsonl").write_text("", encoding="utf-8")
    manifest = json.loads((paths["retail-v1"] / "summary.json").read_text(encoding="utf-8"))
    run = {"battle_id": "retail-v1-running", "white_agent_url": "http://w", "config": manifest["config"]}
    (unfinished / "run.json").write_text(
        json.dumps({**run, "config_hash": "sha256:0", "created_at": "2026-11-23T00:00:00Z"}), encoding="utf-8"
    )
    async with serve_home(tmp_path / "runs", tmp_path) as (url, _):
        _, page = await get_text(f"{url}/ui/runs/compare?run=retail-v1&run=retail-new-tau2")
        refusal = html.unescape(page.split('id="compare-refusal"')[1].split("</p>")[0])
        assert "the runs are not comparable (their fingerprints differ on the shared tasks)" in refusal
        _, page = await get_text(f"{url}/ui/runs/compare?run=retail-v1&run=airline-a")
        assert "no task in common" in html.unescape(page)
        _, home = await get_text(f"{url}/ui/runs")
        running = home.split('data-battle-id="retail-v1-running"')[1].split("</tr>")[0]
        assert "running" in running and "\N{EN DASH}" in running  # no score
        _, page = await get_text(f"{url}/ui/runs/compare?run=retail-v1-running&run=retail-v1")
        assert "resume it with" in html.unescape(page)  # what arena compare says of a run without summary.json


async def test_bad_picks_and_a_backend_without_a_home(tmp_path: Path, backend: RunningBackend) -> None:
    sample_folder(tmp_path / "runs")
    async with serve_home(tmp_path / "runs", tmp_path) as (url, _):
        status, page = await get_text(f"{url}/ui/runs/compare?run=retail-v1")
        assert status == 400 and "pick two different runs" in page
        status, page = await get_text(f"{url}/ui/runs/compare?run=retail-v1&run=absent")
        assert status == 400 and "not in this runs home" in page
        _, index = await get_text(f"{url}/")
        assert 'href="/ui/runs"' in index
    response = await backend.client.get("/ui/runs")
    assert response.status_code == 404 and "arena view runs/" in response.text
    assert (await backend.client.get("/ui/runs/compare?run=a&run=b")).status_code == 404
    assert 'href="/ui/runs"' not in (await backend.client.get("/")).text


async def test_the_battle_list_shows_the_score_of_every_finished_battle(arena: Arena) -> None:
    green, white = await arena.pair()
    finished = await arena.battle(green, ("white_agent", white))
    await arena.started(green, finished)
    green_2, white_2 = await arena.pair()
    running = await arena.battle(green_2, ("white_agent", white_2))
    await arena.post(finished, result("white_agent", battle_result(finished)))
    page = (await arena.client.get("/")).text
    assert "<th>Score</th>" in page
    row = page.split(f'data-battle-id="{finished}"')[1].split("</tr>")[0]
    score = row.split('class="score"')[1].split("</td>")[0]
    # k = 3 has no figure (no task has 3 counted attempts): the largest j that has one, labelled with its j
    assert "pass^2 <strong>0.333</strong>" in score and "[0.10, 0.60]" in score
    other = page.split(f'data-battle-id="{running}"')[1].split("</tr>")[0]
    assert '<td class="score"></td>' in other


def test_the_compare_command_quotes_paths_for_the_shell() -> None:
    def run(battle_id: str, path: str) -> HomeRun:
        return HomeRun(battle_id=battle_id, name=battle_id, path=path, status="finished", tasks=1, k=2)

    view = CompareView(first=run("a", "runs/it's mine"), second=run("b", "/runs/plain-v1"), comparison=None)
    assert view.command == "arena compare 'runs/it'\"'\"'s mine' /runs/plain-v1"
    assert shlex.split(view.command) == ["arena", "compare", "runs/it's mine", "/runs/plain-v1"]
