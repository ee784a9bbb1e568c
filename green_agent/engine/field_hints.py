"""Validation errors of a scenario file in the words its author needs: the field, and what they probably meant.

Why: pydantic says "Extra inputs are not permitted" for a misspelt key, which names neither the mistake nor the fix.
A scenario's models (the battle config, and the launcher's scenario model that nests it) know
their fields, so an unknown key is compared with the fields of the model it was found in (walked by the error's
``loc``) and the closest one is suggested; with nothing close, the valid fields are listed. Every other problem keeps
the engine's ``field.path: message`` form.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import AliasChoices, AliasPath, BaseModel, ValidationError

__all__ = ["SUGGESTION_CUTOFF", "describe_problem", "field_names", "format_model_error", "model_at"]

SUGGESTION_CUTOFF = 0.6
"""difflib similarity a valid field needs to be suggested (0.6 is difflib's default: catches one or two typos)."""

Loc = Sequence[str | int]


def field_names(model: type[BaseModel]) -> list[str]:
    """The names a key may have in ``model``: field names, then accepted aliases (``task_id`` for ``task_index``)."""
    names = list(model.model_fields)
    for info in model.model_fields.values():
        for alias in (info.alias, info.validation_alias):
            if isinstance(alias, str):
                names.append(alias)
            elif isinstance(alias, AliasChoices):
                names.extend(choice for choice in alias.choices if isinstance(choice, str))
            elif isinstance(alias, AliasPath) and alias.path and isinstance(alias.path[0], str):
                names.append(alias.path[0])
    return list(dict.fromkeys(names))


def _field_annotation(model: type[BaseModel], key: str) -> Any:
    """The annotation of the field ``key`` names (by name or by alias), or None."""
    info = model.model_fields.get(key)
    if info is not None:
        return info.annotation
    for info in model.model_fields.values():
        alias = info.validation_alias
        choices = alias.choices if isinstance(alias, AliasChoices) else [alias, info.alias]
        if key in choices:
            return info.annotation
    return None


def _step(annotation: Any, part: str | int) -> Any:
    """What sits at ``part`` inside a value of type ``annotation`` (None when the type says nothing about it)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _step(get_args(annotation)[0], part)
    if origin is Union or origin is types.UnionType:
        for arm in get_args(annotation):
            found = _step(arm, part)
            if found is not None:
                return found
        return None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _field_annotation(annotation, part) if isinstance(part, str) else None
    args = get_args(annotation)
    if isinstance(origin, type) and issubclass(origin, Mapping) and len(args) == 2:
        return args[1]
    if isinstance(origin, type) and issubclass(origin, (list, tuple, set, frozenset)) and args:
        return args[0] if isinstance(part, int) else None
    return None


def _as_model(annotation: Any) -> type[BaseModel] | None:
    """The model class an annotation holds (through ``Annotated`` and ``X | None``), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = get_origin(annotation)
    if origin is Annotated:
        return _as_model(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        models = [m for m in (_as_model(arm) for arm in get_args(annotation)) if m is not None]
        return models[0] if len(models) == 1 else None
    return None


def model_at(root: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model that holds the value at ``loc`` (a pydantic error location) inside ``root``, or None."""
    annotation: Any = root
    for part in loc:
        annotation = _step(annotation, part)
        if annotation is None:
            return None
    return _as_model(annotation)


def _suggestion(key: str, candidates: Sequence[str], valid: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=SUGGESTION_CUTOFF)
    if close:
        return f"unknown field; did you mean {close[0]!r}?"
    return f"unknown field (valid fields: {', '.join(valid)})"


def describe_problem(
    root: type[BaseModel], item: Mapping[str, Any], *, extra_names: Mapping[tuple[str | int, ...], Sequence[str]]
) -> str:
    """The message of one pydantic error item (without its path); ``extra_names`` adds keys a model accepts
    before validation (e.g. a table a ``mode="before"`` validator moves), by the location of that model."""
    message = str(item["msg"]).removeprefix("Value error, ")
    loc = tuple(item.get("loc") or ())
    if item.get("type") != "extra_forbidden" or not loc or not isinstance(loc[-1], str):
        return message
    parent = model_at(root, loc[:-1])
    if parent is None:
        return message
    valid = list(parent.model_fields)
    added = list(extra_names.get(loc[:-1], ()))
    return _suggestion(loc[-1], [*field_names(parent), *added], [*valid, *added])


def format_model_error(
    error: ValidationError,
    root: type[BaseModel],
    *,
    extra_names: Mapping[tuple[str | int, ...], Sequence[str]] | None = None,
    rename: Mapping[tuple[str | int, ...], tuple[str | int, ...]] | None = None,
) -> str:
    """One ``path: problem`` per error, ``; ``-separated (the engine's format), with did-you-mean for unknown keys.

    ``rename`` maps a location prefix to the one the file's author wrote (a table a validator moved shows where it
    was written)."""
    lines = []
    for item in error.errors():
        loc = tuple(item.get("loc") or ())
        shown = loc
        for prefix, written in (rename or {}).items():
            if loc[: len(prefix)] == prefix:
                shown = (*written, *loc[len(prefix) :])
                break
        where = ".".join(str(part) for part in shown) or "<root>"
        lines.append(f"{where}: {describe_problem(root, item, extra_names=extra_names or {})}")
    return "; ".join(lines)
