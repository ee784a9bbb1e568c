"""``arena backend --help`` (and ``green``, ``white``) in the same style as every other ``arena`` command.

Why: those three commands hand their arguments to ``python -m battle_backend`` / ``green_agent`` / ``white_agent``,
whose command lines are argparse, so their help looked unlike the rest (typer + rich). Their flags stay theirs (the
argparse parser is the single definition; nothing is copied here): the module runs in a child process until it
parses its arguments, where the parser is described as JSON instead (:func:`_describe`), and this process renders
that description with typer's own help formatter. The launcher never imports the backend (import directions):
like serving, describing happens in a child process of the module.
"""

from __future__ import annotations

import argparse
import inspect
import json
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAX_DESCRIPTION_BYTES = 1_000_000
HELP_TIMEOUT_S = 60.0


class _Flag(BaseModel):
    model_config = ConfigDict(extra="ignore")

    names: list[str] = Field(max_length=8)
    dest: str = Field(max_length=200)
    help: str | None = Field(default=None, max_length=5000)
    metavar: str | None = Field(default=None, max_length=200)
    default: str | None = Field(default=None, max_length=2000)
    type: str = Field(default="text", max_length=20)
    choices: list[str] | None = Field(default=None, max_length=200)
    flag: bool = False
    repeatable: bool = False
    required: bool = False


class _Description(BaseModel):
    model_config = ConfigDict(extra="ignore")

    description: str | None = Field(default=None, max_length=5000)
    epilog: str | None = Field(default=None, max_length=10000)
    flags: list[_Flag] = Field(max_length=500)


def _describe(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The parser's options as JSON-able data (help texts with their %(default)s expanded)."""
    formatter = parser._get_formatter()
    flags = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        kind = getattr(action.type, "__name__", "text") if action.type is not None else "text"
        flags.append(
            {
                "names": list(action.option_strings) or [action.dest],
                "dest": action.dest,
                "help": formatter._expand_help(action) if action.help else None,
                "metavar": action.metavar if isinstance(action.metavar, str) else None,
                "default": None if action.default in (None, False, argparse.SUPPRESS) else str(action.default),
                "type": {"int": "int", "float": "float", "Path": "path"}.get(kind, "text"),
                "choices": [str(choice) for choice in action.choices] if action.choices else None,
                "flag": action.nargs == 0,
                "repeatable": isinstance(action, (argparse._AppendAction, argparse._ExtendAction)),
                "required": bool(action.required),
            }
        )
    return {"description": parser.description, "epilog": parser.epilog, "flags": flags}


def _dump_instead_of_parsing(module: str) -> NoReturn:
    """Run ``module`` as ``python -m`` would, up to its ``parse_args``: print the parser's description, exit 0."""

    def dump(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> NoReturn:
        print(json.dumps(_describe(self)))
        sys.exit(0)

    argparse.ArgumentParser.parse_args = dump  # type: ignore[method-assign]
    sys.argv = [module]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    sys.exit(f"{module} did not parse a command line")


_TYPES: dict[str, type] = {"int": int, "float": float, "path": Path, "text": str}


def _parameter(index: int, flag: _Flag) -> inspect.Parameter:
    """One typer option (or argument) showing what the argparse flag takes (typer only renders it here)."""
    help_text = (flag.help or "") + (f" (one of: {', '.join(flag.choices)})" if flag.choices else "")
    default: Any = False if flag.flag else flag.default
    kind: Any = bool if flag.flag else _TYPES.get(flag.type, str)
    if not flag.names[0].startswith("-"):
        info: Any = typer.Argument(help=help_text or None, metavar=flag.metavar, show_default=False)
    else:
        if flag.repeatable:
            kind, default, help_text = list[kind], None, help_text + " (repeatable)"
        shown = default not in (None, False) and "default" not in help_text.lower()  # said once, not twice
        info = typer.Option(*flag.names, help=help_text or None, metavar=flag.metavar, show_default=shown)
    optional: Any = kind if default is not None or flag.flag else kind | None
    annotation = Annotated[optional, info]
    param_default = inspect.Parameter.empty if flag.required else default
    return inspect.Parameter(f"p{index}", inspect.Parameter.KEYWORD_ONLY, default=param_default, annotation=annotation)


def _help_app(prog: str, summary: str, description: _Description) -> typer.Typer:
    def command(**_: Any) -> None:
        """Never run: only its help is shown."""

    parameters = [_parameter(index, flag) for index, flag in enumerate(description.flags)]
    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    text = "\n\n".join(part for part in (summary, description.description, description.epilog) if part)
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")
    app.command(name=prog, help=text)(command)
    return app


def print_module_help(module: str, prog: str, summary: str) -> int:
    """Print the help of ``python -m module`` as ``prog`` in the style of the other commands; the exit code."""
    argv = [sys.executable, "-m", "launcher.cli.module_help", module]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=HELP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        print(f"error: {module} did not describe its options within {HELP_TIMEOUT_S:g} s", file=sys.stderr)
        return 3
    try:
        if done.returncode != 0 or len(done.stdout) > MAX_DESCRIPTION_BYTES:
            raise ValueError(done.stderr.decode("utf-8", "replace")[-2000:] or f"exit {done.returncode}")
        description = _Description.model_validate_json(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError, ValidationError) as error:
        print(f"error: cannot read the options of {module}: {error}", file=sys.stderr)
        return 3
    try:
        _help_app(prog, summary, description)(["--help"], prog_name=prog)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 0
    return 0


if __name__ == "__main__":
    _dump_instead_of_parsing(sys.argv[1])
