"""Finds every exception class of a package statically (ast) and draws or reads its tree (see test_exception_trees)."""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FOREIGN_EXCEPTIONS = frozenset({"httpx.TransportError"})
"""Exception bases from other libraries that our classes extend (builtins are recognised by themselves)."""

_LINE = re.compile(r"^(?P<indent>(?:    )*)(?P<name>[A-Za-z_][\w.]*)(?:\s+\((?P<module>[\w.]+)\))?$")


@dataclass(frozen=True)
class ExceptionClass:
    name: str
    base: str  # the first base that is an exception: a class of the package, a builtin or a foreign class
    module: str  # dotted, relative to the package (e.g. ``engine.config``)


def _is_builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def exception_classes(package: str) -> list[ExceptionClass]:
    """Every class of ``package`` that derives from an exception (through builtins, foreign bases or each other)."""
    candidates: list[tuple[str, list[str], str]] = []
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT / package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        module = ".".join(parts) or "__init__"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                candidates.append((node.name, [ast.unparse(base) for base in node.bases], module))
    found: dict[tuple[str, str], ExceptionClass] = {}
    ours: set[str] = set()
    changed = True
    while changed:  # a class is an exception once one of its bases is
        changed = False
        for name, bases, module in candidates:
            if (name, module) in found:
                continue
            for base in bases:
                if _is_builtin_exception(base) or base in FOREIGN_EXCEPTIONS or base.split(".")[-1] in ours:
                    found[(name, module)] = ExceptionClass(name, base.split(".")[-1] if base in ours else base, module)
                    ours.add(name)
                    changed = True
                    break
    return sorted(found.values(), key=lambda c: (c.module, c.name))


def draw_tree(classes: list[ExceptionClass]) -> str:
    """The tree as the package's errors module draws it: roots are the outside bases, four spaces per level."""
    children: dict[str, list[ExceptionClass]] = {}
    for cls in classes:
        children.setdefault(cls.base, []).append(cls)
    names = {cls.name for cls in classes}
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for cls in sorted(children.get(parent, []), key=lambda c: c.name.lstrip("_").lower()):
            lines.append(f"{'    ' * depth}{cls.name} ({cls.module})")
            walk(cls.name, depth + 1)

    for root in sorted(set(children) - names, key=str.lower):
        lines.append(root)
        walk(root, 1)
    return "\n".join(lines)


def read_tree(docstring: str) -> str:
    """The tree block of an errors module's docstring: the lines between ``Exception tree::`` and a blank line."""
    block = docstring.split("Exception tree::", 1)[1].lstrip("\n")
    lines = []
    for line in block.splitlines():
        if not line.strip():
            break
        lines.append(line[4:] if line.startswith("    ") else line)
    for line in lines:
        if _LINE.match(line) is None:
            raise ValueError(f"not a tree line: {line!r}")
    return "\n".join(lines)
