"""The GitHub Actions workflow of docs/ci.md (docs/ci/arena-gate.yml): valid YAML shaped like a workflow, every
``arena`` command it runs parses with this version's CLI (unknown options or bad values fail here, not in a user's
CI), it gates the battle (``arena run ... --fail-under``) and compares it with a baseline (``arena compare ...
--fail-if worse``), and docs/ci.md shows the file as it is."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.main import get_command

from launcher.cli.app import app

REPO = Path(__file__).resolve().parents[3]
WORKFLOW = REPO / "docs" / "ci" / "arena-gate.yml"
DOC = REPO / "docs" / "ci.md"
OPERATORS = {"&&", "||", ";", "|", ">", ">>", "<", "&", "2>", "(", ")"}


def load_workflow() -> dict[Any, Any]:
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def steps(workflow: dict[Any, Any]) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """Every step with the environment it sees (workflow, job and step ``env``)."""
    found = []
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            env = {**workflow.get("env", {}), **job.get("env", {}), **step.get("env", {})}
            found.append(({str(k): str(v) for k, v in env.items()}, step))
    return found


def expand(token: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env.get(m.group(1), m.group(0)), token)


def arena_commands(script: str, env: dict[str, str]) -> list[list[str]]:
    """The argument lists of every ``arena`` invocation in a shell script (``.venv/bin/arena``, ``arena``)."""
    commands = []
    for line in script.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
        for index, token in enumerate(tokens):
            if Path(token).name == "arena":
                args = []
                for arg in tokens[index + 1 :]:
                    if arg in OPERATORS:
                        break
                    args.append(expand(arg, env))
                commands.append(args)
    return commands


def all_commands() -> list[tuple[str, list[str]]]:
    return [
        (args[0], args[1:])
        for env, step in steps(load_workflow())
        if "run" in step
        for args in arena_commands(step["run"], env)
    ]


def test_the_workflow_is_shaped_like_a_github_actions_workflow() -> None:
    workflow = load_workflow()
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert isinstance(triggers, dict) and "pull_request" in triggers
    for job in workflow["jobs"].values():
        assert job["runs-on"] and job["steps"]
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), step
    assert {name for name, _ in all_commands()} == {"run", "compare"}


def test_every_arena_command_parses_with_this_cli() -> None:
    group: Any = get_command(app)  # typer's group (its own copy of click: only the public methods are used)
    for name, args in all_commands():
        command = group.commands[name]
        try:  # parses and converts every option and argument, runs nothing
            context = command.make_context(f"arena {name}", list(args))
        except Exception as error:  # a usage error: an unknown option, a missing or invalid value
            pytest.fail(f"arena {name} {shlex.join(args)}: {getattr(error, 'format_message', error.__str__)()}")
        context.close()


def test_the_battle_is_gated_and_compared_with_the_baseline() -> None:
    commands = all_commands()
    (run,) = [args for name, args in commands if name == "run"]
    (compare,) = [args for name, args in commands if name == "compare"]
    assert (REPO / run[0]).is_file(), "the scenario the workflow runs exists"
    assert "--fail-under" in run or "--fail-under-lower" in run
    assert "--json" in run
    assert compare[compare.index("--fail-if") + 1] == "worse"
    battle = run[run.index("--battle-id") + 1]
    assert compare[0] == f"runs/{battle}", "the candidate (this battle) is compared first"
    assert compare[1].endswith("summary.json")


def test_docs_ci_shows_the_workflow_file_as_it_is() -> None:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)
    assert WORKFLOW.read_text(encoding="utf-8") in blocks
