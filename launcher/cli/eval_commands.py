"""``arena score`` and ``arena eval-csv``: the evaluations from the command line, with rich tables and JSON out.

    arena score FILE [--judge lexical] [--out results.json]
        FILE is a /run request (Fair-Forge format) or ragas-style samples; prints tables, writes the JSON result.
    arena eval-csv FILE --agent URL|finance-demo [--concurrency 4] [--timeout 60] [--out results.json]
        runs a CSV suite live against an A2A agent, case by case with progress; ``finance-demo`` starts the offline
        finance white agent as a subprocess on a free loopback port and stops it afterwards (nothing else is ever
        started).

Exit codes: 0 the evaluation ran (whatever the agent scored), 1 it could not run (agent unreachable, harness
failure), 2 bad input (file, options, connector). Keys are read from files or LLM_API_KEY and never printed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from launcher.cli.eval_reasons import case_reason, conversation_reason

logger = logging.getLogger(__name__)

DEFAULT_OUT_DIR = Path("runs") / "evaluations"
FINANCE_DEMO = "finance-demo"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _colour(value: float | None) -> str:
    if value is None:
        return "dim"
    return "green" if value >= 0.7 else "yellow" if value >= 0.4 else "red"


def _write_json(result: dict[str, Any], out: Path | None, default_name: str, console: Console) -> Path:
    path = out or DEFAULT_OUT_DIR / default_name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    console.print(f"results written to [bold]{path}[/bold]")
    return path


def _judge_settings(cache: Path | None, no_cache: bool, base_url: str | None, provider: str | None) -> Any:
    from green_agent.evaluations.judge import DEFAULT_CACHE_PATH, JudgeSettings

    overrides = {provider: base_url} if base_url and provider else {}
    return JudgeSettings(
        cache_path=None if no_cache else (cache or DEFAULT_CACHE_PATH),
        base_url_overrides=overrides,
        allow_base_url=True,
    )


# - arena score -------------------------------------------------------------------------------------------------------


def _print_run(result: dict[str, Any], console: Console) -> None:
    table = Table(title="Conversations (each one trial)", show_lines=False)
    for column in ("session", "assistant", "status", "correct", "answer scores", "tool correctness", "why"):
        table.add_column(column)
    for conv in result["per_conversation_metrics"]:
        scores = ", ".join(_fmt(s, 2) for s in conv["correctness_scores"])
        tools = [t for t in conv["tool_correctness_scores"] if t is not None]
        tool_text = ", ".join(f"{t['overall_correctness']:.2f}{'' if t['is_correct'] else '✗'}" for t in tools) or "-"
        colour = {"correct": "green", "incorrect": "red", "unscored": "yellow"}[conv["status"]]
        table.add_row(
            escape(conv["session_id"]),
            escape(conv["assistant_id"]),
            f"[{colour}]{conv['status']}[/{colour}]",
            f"{conv['correct_interactions']}/{conv['total_interactions']}",
            scores,
            tool_text,
            escape(conversation_reason(conv)),
        )
    console.print(table)
    agg = result["aggregated_metrics"]
    summary = Table(title=f"Aggregate (k = {agg['k']}, judge: {escape(result['judge']['name'])})", show_header=False)
    summary.add_column("metric")
    summary.add_column("value")
    summary.add_row(
        "conversations",
        f"{agg['total_conversations']} ({agg['scored_conversations']} scored, "
        f"{agg['unscored_conversations']} unscored)",
    )
    summary.add_row(
        "fully correct", f"{agg['fully_correct_conversations']} (rate {_fmt(agg['conversation_success_rate'])})"
    )
    summary.add_row(f"pass@{agg['k']}", _fmt(agg["pass_at_k"]))
    summary.add_row(f"pass^{agg['k']}", _fmt(agg["pass_pow_k"]))
    if agg["projections"]:
        proj = agg["projections"]
        summary.add_row(
            "projections",
            f"pass@k {_fmt(proj['pass_at_k'])}, pass^k {_fmt(proj['pass_pow_k'])} [dim]({escape(proj['label'])})[/dim]",
        )
    summary.add_row("interpretation", agg["interpretation"] or "n/a (undefined at this k)")
    console.print(summary)
    for warning in result.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")


def _print_samples(result: dict[str, Any], console: Console) -> None:
    table = Table(title="Samples")
    for column in ("sample", "metric", "score", "judges"):
        table.add_column(column)
    for item in result["results"]:
        judges = "; ".join(
            f"{j['judge']}: {_fmt(j['score'], 2)}" + (f" ({j['reason']})" if j["status"] == "unscored" else "")
            for j in item["judges"]
        )
        colour = _colour(item["score"])
        table.add_row(
            escape(item["sample"]),
            escape(item["metric"]),
            f"[{colour}]{_fmt(item['score'], 2)}[/{colour}]",
            escape(judges),
        )
    console.print(table)
    summary = Table(title="Metrics")
    for column in ("metric", "mean", "scored", "unscored", "per judge"):
        summary.add_column(column)
    for item in result["summary"]:
        per_judge = ", ".join(f"{k}: {_fmt(v, 2)}" for k, v in item["per_judge_mean"].items())
        summary.add_row(
            escape(item["metric"]), _fmt(item["mean"]), str(item["scored"]), str(item["unscored"]), escape(per_judge)
        )
    console.print(summary)


def score_command(
    file: Annotated[
        Path, typer.Argument(help="JSON: a /run request (datasets) or ragas-style samples", show_default=False)
    ],
    judge: Annotated[str, typer.Option(help="auto (what the file says), lexical (offline) or llm")] = "auto",
    out: Annotated[Path | None, typer.Option(help="where to write the JSON result")] = None,
    json_only: Annotated[bool, typer.Option("--json", help="print only the JSON result on stdout")] = False,
    cache: Annotated[Path | None, typer.Option(help="judge verdict cache (SQLite)")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="do not read or write the verdict cache")] = False,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible URL for --provider's judge calls")] = None,
    provider: Annotated[str | None, typer.Option(help="provider whose endpoint --base-url replaces")] = None,
) -> None:
    """Score recorded conversations (Fair-Forge /run format) or ragas-style samples; table on screen, JSON out."""
    from green_agent.evaluations.judge_cache import JudgeCache
    from green_agent.evaluations.score_file import ScoreFileError, score_document

    console = Console(stderr=json_only)
    if judge not in ("auto", "lexical", "llm"):
        console.print("[red]--judge must be auto, lexical or llm[/red]")
        raise typer.Exit(EXIT_USAGE)
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        console.print(f"[red]cannot read {file}: {error}[/red]")
        raise typer.Exit(EXIT_USAGE) from None
    settings = _judge_settings(cache, no_cache, base_url, provider)

    async def go() -> dict[str, Any]:
        if settings.cache_path is None or judge == "lexical":
            return await score_document(document, settings=settings, judge=judge)  # type: ignore[arg-type]
        async with JudgeCache(settings.cache_path) as verdicts:
            return await score_document(
                document,
                settings=settings,
                judge=judge,  # type: ignore[arg-type]
                cache=verdicts,
            )

    try:
        result = asyncio.run(go())
    except ScoreFileError as error:
        console.print(f"[red]error:[/red] {escape(str(error))}")
        raise typer.Exit(EXIT_USAGE) from None
    if json_only:
        sys.stdout.write(json.dumps(result, indent=2, ensure_ascii=False, default=str) + "\n")
        if out:
            _write_json(result, out, "", console)
        return
    (_print_run if result["kind"] == "run" else _print_samples)(result, console)
    _write_json(result, out, f"{file.stem}-score.json", console)


# - arena eval-csv ----------------------------------------------------------------------------------------------------


async def _start_finance_demo(group: Any, python: str) -> str:
    from launcher.ports import free_port, loopback_url

    port = free_port()
    url = loopback_url(port)
    argv = [
        python,
        "-m",
        "white_agent",
        "--kind",
        "finance",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--card-url",
        url + "/",
    ]
    await group.start_and_wait("finance_demo", argv, url + "/.well-known/agent-card.json", timeout_s=60.0)
    return url


async def _run_csv(
    file: Path, agent: str, options: Any, judge: Any, console: Console, quiet: bool, log_dir: Path
) -> tuple[int, dict[str, Any]]:
    from green_agent.evaluations.csv_runner import run_csv_suite
    from green_agent.evaluations.csv_suite import parse_csv_suite
    from launcher.processes import ProcessError, ProcessGroup

    suite = await asyncio.to_thread(
        parse_csv_suite, file.read_bytes(), max_bytes=options["max_bytes"], max_cases=options["max_cases"]
    )
    for warning in suite.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    cases: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    async with ProcessGroup(log_dir) as group:
        url = agent
        if agent == FINANCE_DEMO:
            try:
                url = await _start_finance_demo(group, sys.executable)
            except ProcessError as failure:
                return EXIT_FAILED, {"error": {"message": f"the finance demo agent did not start: {failure}"}}
            console.print(f"started the offline finance demo agent at {url}")
        console.print(
            f"running {len(suite.cases)} case(s) against {url} (concurrency {options['run'].concurrency}, "
            f"judge {judge.name})"
        )
        async for name, data in run_csv_suite(suite, url, judge, options=options["run"]):
            if name == "test_case_result":
                cases.append(data)
                if not quiet:
                    status = data["status"]
                    colour = {"passed": "green", "failed": "red", "errored": "red", "unscored": "yellow"}[status]
                    overall = data["scores"].get("overall")
                    console.print(
                        f"[{colour}]{status:>8}[/{colour}] {escape(data['test_id'])}  overall {_fmt(overall, 2)}"
                        f"  ({len(cases)}/{data['total']})"
                    )
            elif name == "summary":
                summary = data
            elif name == "error":
                error = data
    cases.sort(key=lambda c: c["index"])
    result = {"suite": str(file), "agent_url": url, "summary": summary, "error": error, "cases": cases}
    return (EXIT_FAILED if error else EXIT_OK), result


def _print_csv(result: dict[str, Any], console: Console) -> None:
    table = Table(title="Test cases")
    for column in ("test", "status", "tool selection", "arguments", "faithfulness", "overall", "why"):
        table.add_column(column)
    for case in result["cases"]:
        scores = case["scores"]
        cells = [
            f"[{_colour(scores.get(k))}]{_fmt(scores.get(k), 2)}[/{_colour(scores.get(k))}]"
            for k in ("tool_selection", "argument_match", "faithfulness", "overall")
        ]
        table.add_row(escape(case["test_id"]), case["status"], *cells, escape(case_reason(case)))
    console.print(table)
    summary = result.get("summary")
    if summary:
        console.print(
            f"passed {summary['passed']}/{summary['total']} (pass rate {_fmt(summary['pass_rate'])}, 95% CI "
            f"[{_fmt(summary['pass_rate_ci_low'])}, {_fmt(summary['pass_rate_ci_high'])}]); failed "
            f"{summary['failed']}, errored {summary['errored']}, unscored {summary['unscored']}; judge "
            f"{summary['judge']['name']}; {summary['wall_time_s']} s ({summary['cases_per_s']} cases/s)"
        )


def eval_csv_command(
    file: Annotated[Path, typer.Argument(help="CSV test suite", show_default=False)],
    agent: Annotated[str, typer.Option(help="A2A URL of the agent under test, or finance-demo (started offline)")],
    concurrency: Annotated[int, typer.Option(min=1, max=32, help="cases in flight")] = 4,
    timeout: Annotated[float, typer.Option(help="seconds per case")] = 60.0,
    judge: Annotated[str, typer.Option(help="lexical (offline) or llm (needs --connector)")] = "lexical",
    connector: Annotated[str | None, typer.Option(help="judge connector JSON, or @file.json")] = None,
    out: Annotated[Path | None, typer.Option(help="where to write the JSON results")] = None,
    max_cases: Annotated[int, typer.Option(help="case limit")] = 100,
    max_bytes: Annotated[int, typer.Option(help="file size limit in bytes")] = 5 * 1024 * 1024,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="do not use the judge verdict cache")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no per-case lines")] = False,
    log_dir: Annotated[Path, typer.Option(help="where the finance demo agent's logs go")] = DEFAULT_OUT_DIR / "logs",
) -> None:
    """Run a CSV test suite live against an agent over A2A; table on screen, JSON out."""
    from green_agent.evaluations.connectors import ConnectorError, resolve_connector
    from green_agent.evaluations.csv_runner import CsvRunOptions
    from green_agent.evaluations.csv_suite import CsvValidationError
    from green_agent.evaluations.judge import LexicalJudge, LlmJudge
    from green_agent.evaluations.judge_cache import JudgeCache

    console = Console()
    if agent != FINANCE_DEMO and not agent.startswith(("http://", "https://")):
        console.print("[red]--agent must be an http(s) URL or finance-demo[/red]")
        raise typer.Exit(EXIT_USAGE)
    if judge not in ("lexical", "llm"):
        console.print("[red]--judge must be lexical or llm[/red]")
        raise typer.Exit(EXIT_USAGE)
    block: dict[str, Any] | None = None
    if judge == "llm":
        if not connector:
            console.print("[red]--judge llm needs --connector (JSON or @file)[/red]")
            raise typer.Exit(EXIT_USAGE)
        try:
            text = Path(connector[1:]).read_text(encoding="utf-8") if connector.startswith("@") else connector
            block = json.loads(text)
        except (OSError, ValueError):
            console.print("[red]--connector is not valid JSON (or the @file cannot be read)[/red]")
            raise typer.Exit(EXIT_USAGE) from None
    try:
        run_options = CsvRunOptions(concurrency=concurrency, case_timeout_s=timeout)
    except ValueError as error:
        console.print(f"[red]{error}[/red]")
        raise typer.Exit(EXIT_USAGE) from None
    settings = _judge_settings(None, no_cache, None, None)
    started = time.strftime("%Y%m%d-%H%M%S")

    async def go() -> tuple[int, dict[str, Any]]:
        options = {"run": run_options, "max_cases": max_cases, "max_bytes": max_bytes}
        if block is None:
            return await _run_csv(file, agent, options, LexicalJudge(), console, quiet, log_dir)
        resolved = resolve_connector(block, allow_base_url=True)
        verdicts = JudgeCache(settings.cache_path) if settings.cache_path else None
        llm = LlmJudge(resolved, cache=verdicts)
        try:
            if verdicts is not None:
                await verdicts.__aenter__()
            return await _run_csv(file, agent, options, llm, console, quiet, log_dir)
        finally:
            await llm.aclose()
            if verdicts is not None:
                await verdicts.aclose()

    try:
        code, result = asyncio.run(go())
    except CsvValidationError as error:
        table = Table(title=f"{file}: invalid test suite")
        for column in ("row", "column", "problem"):
            table.add_column(column)
        for problem in error.problems:
            table.add_row(str(problem.row or ""), escape(problem.column or ""), escape(problem.message))
        console.print(table)
        raise typer.Exit(EXIT_USAGE) from None
    except ConnectorError as error:
        console.print(f"[red]Failed to create LLM connector: {escape(str(error))}[/red]")
        raise typer.Exit(EXIT_USAGE) from None
    except OSError as error:
        console.print(f"[red]cannot read {file}: {error}[/red]")
        raise typer.Exit(EXIT_USAGE) from None
    if result.get("error"):
        console.print(f"[red]error:[/red] {escape(result['error']['message'])}")
    if result.get("cases") is not None:
        _print_csv(result, console)
        _write_json(result, out, f"{file.stem}-{started}.json", console)
    raise typer.Exit(code)
