"""Each package draws its whole exception tree in one module's docstring (httpx's ``_exceptions.py`` is the model),
and the drawing is the truth: every exception class of the package, under its base, with its module; no name twice.

Found statically (ast), like the import tests: a class counts once one of its bases is a builtin exception, a
foreign one (:data:`exception_tree.FOREIGN_EXCEPTIONS`) or another exception class of the package.
"""

from __future__ import annotations

import ast
from collections import Counter

import pytest

from tests.architecture.exception_tree import ROOT, ExceptionClass, draw_tree, exception_classes, read_tree

TREE_MODULES = {
    "battle_backend": "battle_backend/errors.py",
    "green_agent": "green_agent/errors.py",
    "launcher": "launcher/errors.py",
    "white_agent": "white_agent/errors.py",
}
"""Package -> the module whose docstring draws its tree."""


@pytest.mark.parametrize("package", sorted(TREE_MODULES))
def test_the_drawn_tree_is_the_code(package: str) -> None:
    source = (ROOT / TREE_MODULES[package]).read_text(encoding="utf-8")
    docstring = ast.get_docstring(ast.parse(source)) or ""
    drawn = read_tree(docstring)
    actual = draw_tree(exception_classes(package))
    assert drawn == actual, f"redraw the tree in {TREE_MODULES[package]}'s docstring as:\n{actual}"


@pytest.mark.parametrize("package", sorted(TREE_MODULES))
def test_no_exception_name_is_defined_twice(package: str) -> None:
    counts = Counter(cls.name for cls in exception_classes(package))
    assert [name for name, count in counts.items() if count > 1] == []


def test_the_finder_sees_subclasses_of_subclasses_and_foreign_bases() -> None:
    """The finder itself: a launcher class two levels down and green_agent's httpx-based one are found."""
    launcher = {cls.name: cls for cls in exception_classes("launcher")}
    assert launcher["ChildExitedError"] == ExceptionClass("ChildExitedError", "ProcessError", "processes")
    green = {cls.name: cls for cls in exception_classes("green_agent")}
    assert green["ReplyTooLarge"].base == "httpx.TransportError"
    assert green["BattleIdError"].base == "ConfigError"


def test_a_tree_that_misses_a_class_is_refused() -> None:
    classes = [ExceptionClass("A", "ValueError", "x"), ExceptionClass("B", "A", "y")]
    assert draw_tree(classes) == "ValueError\n    A (x)\n        B (y)"
    assert read_tree("Exception tree::\n\n    ValueError\n        A (x)\n") != draw_tree(classes)
    with pytest.raises(ValueError, match="not a tree line"):
        read_tree("Exception tree::\n\n    ValueError\n      A x\n")
