"""Argument checks shared by the metrics modules.

Why a module of its own: every public function must reject bad input the same way, with a ``ValueError`` whose
message names the argument and the allowed range, instead of silently returning NaN or a clamped value. Keeping the
checks here keeps that promise uniform.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np


def require_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """Return ``value`` as an ``int``; reject bools, floats (even ``2.0``) and anything below ``minimum``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"{name} must be an integer{bound}, got {value!r} ({type(value).__name__})")
    result = operator.index(value)
    if minimum is not None and result < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {result}")
    return result


def require_real(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a finite ``float`` within the given bounds; NaN and infinities are rejected."""
    lo_b = "(" if low_open else "["
    hi_b = ")" if high_open else "]"
    allowed = f"a finite number in {lo_b}{'-inf' if low is None else low}, {'inf' if high is None else high}{hi_b}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be {allowed}, got {value!r} ({type(value).__name__})")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be {allowed}, got {result!r}")
    if low is not None and (result < low or (low_open and result == low)):
        raise ValueError(f"{name} must be {allowed}, got {result!r}")
    if high is not None and (result > high or (high_open and result == high)):
        raise ValueError(f"{name} must be {allowed}, got {result!r}")
    return result


def require_probability(name: str, value: Any) -> float:
    """A finite float in [0, 1]."""
    return require_real(name, value, low=0.0, high=1.0)


def require_confidence(name: str, value: Any) -> float:
    """A confidence level strictly between 0 and 1 (0.95 for a 95% interval)."""
    return require_real(name, value, low=0.0, high=1.0, low_open=True, high_open=True)


def ordered_items(name: str, value: Any) -> list[Any]:
    """Materialise an ordered collection; reject strings, mappings and sets, whose order or items are not trials."""
    if isinstance(value, (str, bytes, bytearray, Mapping, AbstractSet)):
        raise ValueError(f"{name} must be an ordered sequence (list/tuple), got {type(value).__name__}")
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional, got an array of shape {value.shape}")
        return list(value.tolist())
    if isinstance(value, Sequence):
        return list(value)
    if isinstance(value, Iterable):
        return list(value)
    raise ValueError(f"{name} must be an ordered sequence (list/tuple), got {type(value).__name__}")


def require_outcomes(name: str, value: Any) -> list[bool | None]:
    """Validate a list of trial outcomes: ``True`` / ``False``, or ``None`` for an infrastructure error.

    Integers (even 0/1) are rejected on purpose: a stray reward or score must not be read as an outcome.
    """
    items = ordered_items(name, value)
    out: list[bool | None] = []
    for index, item in enumerate(items):
        kind = type(item)
        if kind is bool or item is None:
            out.append(item)
        elif isinstance(item, np.bool_):
            out.append(bool(item))
        else:
            raise ValueError(
                f"{name}[{index}] must be True, False or None (infrastructure error), got {item!r} ({kind.__name__})"
            )
    return out
