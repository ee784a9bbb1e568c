"""``arena view RUN_DIR``: a finished (or interrupted) run's battle page, served offline on loopback.

Why: a run in direct mode (``arena run`` without ``--backend``) leaves only files: the conversations are JSONL, the
failure explanations JSON. The battle page and its attempt viewer already show all of it for battles that went
through a backend, so ``arena view`` puts the run into a throwaway backend rather than rendering it a second way:

1. the run directory becomes the backend's import file (:mod:`launcher.cli.view_import`: the very bodies the green
   agent would have posted, trajectories included), written to a temporary directory;
2. ``python -m battle_backend --host H --port P --db TMP/view.sqlite3 --import TMP/import.json`` starts as a child
   (the launcher never imports the backend), and ``GET /health`` is waited for;
3. the battle page is checked to answer, its URL printed, and the backend serves until Ctrl-C (or SIGTERM/SIGHUP),
   which stops it; the temporary directory (database, import file, the backend's logs) is removed on every exit.

A folder of run directories (``arena view runs/``) opens the runs home instead: every run with its status, score and
failure mix, filters, and the compare view of any two (:mod:`launcher.cli.runs_home` builds one import file per run
and the home's own; all are passed to the backend). Its URL is printed as ``runs home: URL``.

``--no-wait`` stops right after the check (the URL printed is then already gone): for scripts that only want to
know that the run can be shown.

Exit codes: 0 served and stopped by Ctrl-C (or checked, with ``--no-wait``); 1 the backend failed (did not start,
refused the import, exited while serving; its stderr is shown); 2 ``RUN_DIR`` is neither a run directory nor a folder
of them (the message names what is missing); 128 + signal number when stopped by SIGTERM or SIGHUP.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final
from urllib.parse import quote

import httpx
import typer
from rich.console import Console
from rich.markup import escape

from launcher.cli.runs_home import MAX_PAIRS, MAX_RUNS, HomeBuild, build_home, is_run_dir
from launcher.cli.view_import import RunDirError, RunImport, build_import, write_import
from launcher.ports import LOOPBACK_HOSTS, free_port
from launcher.processes import ProcessError, ProcessGroup, wait_until_ready

EXIT_OK: Final = 0
EXIT_BACKEND_FAILED: Final = 1
EXIT_NOT_A_RUN: Final = 2
IMPORT_FILE: Final = "import.json"
DB_FILE: Final = "view.sqlite3"
_WILDCARD_HOSTS: Final = frozenset({"0.0.0.0", "::", ""})


@dataclass(frozen=True)
class ViewOptions:
    """What ``arena view`` was asked for."""

    run_dir: Path
    host: str = "127.0.0.1"
    port: int | None = None
    """None: a free port."""
    wait: bool = True
    """Serve until stopped (False: check that the page answers, then stop)."""
    startup_timeout_s: float = 60.0
    python: str = sys.executable


def backend_argv(python: str, host: str, port: int, db_path: Path, import_path: Path | list[Path]) -> list[str]:
    """The throwaway backend: the run's import file (or the runs home's files) loaded into a fresh database."""
    argv = [python, "-m", "battle_backend", "--host", host, "--port", str(port), "--db", str(db_path)]
    paths = import_path if isinstance(import_path, list) else [import_path]
    return [*argv, *(part for path in paths for part in ("--import", str(path))), "--log-level", "warning"]


def base_url(host: str, port: int) -> str:
    """Where the backend is reached from this machine (a wildcard bind is reached on loopback)."""
    if host in _WILDCARD_HOSTS:
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def _page_answers(url: str, timeout_s: float) -> int:
    """The status code of ``url`` (no proxy: it is on this machine)."""
    async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as client:
        return (await client.get(url)).status_code


def _describe(run: RunImport) -> str:
    result = {
        "unfinished": "no summary (the run stopped early): no result",
        "interrupted": "interrupted: no result",
    }.get(run.status, f"result: {run.status}")
    return (
        f"battle {run.battle_id}: {run.events} events, {run.attempts} attempts "
        f"({run.trajectories} with their conversation), {result}"
    )


def _describe_home(build: HomeBuild) -> str:
    over = f" ({build.runs_over_cap} more over the cap)" if build.runs_over_cap else ""
    pairs = f"; {build.pairs_not_computed} pairs not precomputed (cap)" if build.pairs_not_computed else ""
    return (
        f"{build.runs} runs{over}, {len(build.skipped)} entries not shown; {build.comparisons} comparisons, "
        f"{build.refusals} pairs refused as `arena compare` refuses them{pairs}"
    )


async def _serve_home(options: ViewOptions, console: Console) -> int:
    """The runs home of a folder of run directories (see the module docstring)."""
    console.print(
        f"reading the runs of {escape(str(options.run_dir))} (at most {MAX_RUNS}) and comparing them "
        f"(at most {MAX_PAIRS} pairs with statistics)…",
        soft_wrap=True,
    )
    workdir = Path(tempfile.mkdtemp(prefix="arena-view-"))
    try:
        building = asyncio.ensure_future(asyncio.to_thread(build_home, options.run_dir, workdir))
        try:
            build = await asyncio.shield(building)
        except asyncio.CancelledError:  # Ctrl-C mid-build: let the thread finish before the folder is removed
            await asyncio.gather(building, return_exceptions=True)
            raise
        except RunDirError as error:
            console.print(f"[bold red]error:[/] {escape(str(error))}", soft_wrap=True)
            return EXIT_NOT_A_RUN
        for name, reason in build.skipped:
            console.print(f"[yellow]not shown:[/] {escape(name)}: {escape(reason)}", soft_wrap=True)
        size = sum(path.stat().st_size for path in build.files)
        port = options.port or free_port("127.0.0.1" if options.host in _WILDCARD_HOSTS else options.host)
        page = _Page("runs home", "/ui/runs", _describe_home(build))
        return await _serve(options, console, page, workdir, build.files, size, port)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def serve_view(options: ViewOptions, console: Console) -> int:
    """Show ``options.run_dir`` (a run, or a folder of runs) on a throwaway backend until stopped; the exit code.
    Never leaves the backend or the temporary directory behind."""
    if options.host not in LOOPBACK_HOSTS:
        console.print(
            f"[yellow]warning:[/] --host {escape(options.host)}: the run's conversations are served beyond this "
            "machine, without any login",
            soft_wrap=True,
        )
    folder = await asyncio.to_thread(lambda: options.run_dir.is_dir() and not is_run_dir(options.run_dir))
    if folder:
        return await _serve_home(options, console)
    try:
        run = await asyncio.to_thread(build_import, options.run_dir)
    except RunDirError as error:
        console.print(f"[bold red]error:[/] {escape(str(error))}", soft_wrap=True)
        return EXIT_NOT_A_RUN
    for warning in run.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    workdir = Path(tempfile.mkdtemp(prefix="arena-view-"))
    try:
        import_path = workdir / IMPORT_FILE
        writing = asyncio.ensure_future(asyncio.to_thread(write_import, run.document, import_path))
        try:
            size = await asyncio.shield(writing)
        except asyncio.CancelledError:  # Ctrl-C mid-write: let the thread finish, or it recreates the file below
            await asyncio.gather(writing, return_exceptions=True)
            raise
        port = options.port or free_port("127.0.0.1" if options.host in _WILDCARD_HOSTS else options.host)
        page = _Page("battle page", f"/ui/battles/{quote(run.battle_id, safe='')}", _describe(run))
        return await _serve(options, console, page, workdir, [import_path], size, port)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass(frozen=True)
class _Page:
    """What is served: the printed label of its URL, its path, and the line describing it."""

    label: str
    path: str
    description: str


async def _serve(
    options: ViewOptions,
    console: Console,
    page: _Page,
    workdir: Path,
    import_paths: list[Path],
    size: int,
    port: int,
) -> int:
    base = base_url(options.host, port)
    url = base + page.path
    group = ProcessGroup(workdir / "logs", grace_s=5.0)
    try:
        async with group:
            argv = backend_argv(options.python, options.host, port, workdir / DB_FILE, import_paths)
            proc = group.start("backend", argv)
            await wait_until_ready(proc, f"{base}/health", timeout_s=options.startup_timeout_s)
            status = await _page_answers(url, timeout_s=30.0)
            if status != 200:
                console.print(
                    f"[bold red]error:[/] the backend answers {status} for the {page.label} {url}; "
                    f"its log: {escape(proc.stderr_tail())}",
                    soft_wrap=True,
                )
                return EXIT_BACKEND_FAILED
            console.print(escape(page.description), soft_wrap=True)
            console.print(f"{page.label}: {url}", soft_wrap=True, highlight=False)
            if not options.wait:
                return EXIT_OK
            console.print(f"serving {size // 1024} KiB of run data; press Ctrl-C to stop", soft_wrap=True)
            await group.watch()
    except (ProcessError, httpx.HTTPError) as error:
        console.print(f"[bold red]error:[/] {escape(str(error))}", soft_wrap=True)
        return EXIT_BACKEND_FAILED
    except asyncio.CancelledError:
        if group.received_signal is not None:
            console.print(f"stopped by {group.received_signal.name}", soft_wrap=True)
            return 128 + int(group.received_signal)
        console.print("stopped", soft_wrap=True)  # Ctrl-C: how a view is meant to end
        return EXIT_OK
    return EXIT_OK


def view_command(
    run_dir: Annotated[
        Path,
        typer.Argument(
            metavar="RUN_DIR",
            help="a run directory (runs/<battle id>/), or a folder of them (runs/) for the runs home",
            show_default=False,
        ),
    ],
    port: Annotated[int | None, typer.Option("--port", min=1, max=65535, help="port (default: a free one)")] = None,
    host: Annotated[str, typer.Option("--host", help="bind address (loopback unless you mean to share)")] = "127.0.0.1",
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="check that the battle page answers, then stop (for scripts)")
    ] = False,
    startup_timeout: Annotated[float, typer.Option(help="seconds the backend gets to start")] = 60.0,
) -> None:
    """Show a run directory's battle page (attempts, conversations, failure explanations) offline in the browser.

    Starts a throwaway battle backend on loopback with the run imported, prints the page's URL and serves until
    Ctrl-C. Works for finished, cancelled and interrupted runs. A folder of run directories (runs/) opens the runs
    home: every run with its score, filters, and the `arena compare` statistics of any two. Exit 2 when RUN_DIR is
    neither a run directory nor a folder of them.
    """
    options = ViewOptions(run_dir, host=host, port=port, wait=not no_wait, startup_timeout_s=startup_timeout)
    console = Console(highlight=False)
    raise typer.Exit(asyncio.run(serve_view(options, console)))
