"""File descriptors for many attempts in flight: raise the soft limit at start, refuse a battle that cannot fit.

Every attempt in flight holds a few descriptors in the process that runs it (its tool sandbox's pipe and process
sentinel, its connection to the white agent, the simulated user's when it calls a model): about
:data:`DESCRIPTORS_PER_ATTEMPT`. A battle whose attempts would run out of them would fail with ``EMFILE`` halfway
through, blamed on whoever was being waited on; it is refused before it starts instead, naming ``concurrency`` and
the limit. The soft limit is raised to the hard one when the green agent starts (``arena-green``), as servers do.
"""

from __future__ import annotations

import logging
import resource

from green_agent.engine.config import ConfigError

log = logging.getLogger(__name__)

DESCRIPTORS_PER_ATTEMPT = 6
"""Descriptors one attempt in flight holds in the process that runs it (a little more than measured)."""
DESCRIPTORS_BASE = 256
"""What a green agent holds besides its attempts (listening socket, backend and A2A streams, pools, logs)."""
UNLIMITED_SOFT_CAP = 1 << 20
"""The soft limit set when the hard one is unlimited."""


def raise_descriptor_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to the hard one; the soft limit now in force (unchanged on refusal)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_SOFT_CAP if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as error:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, error)
            return soft
        return target
    return soft


def descriptors_needed(concurrency: int, processes: int = 1) -> int:
    """Descriptors the busiest process needs for ``concurrency`` attempts spread over ``processes``."""
    return DESCRIPTORS_BASE + DESCRIPTORS_PER_ATTEMPT * -(-concurrency // max(1, processes))


def descriptor_problem(concurrency: int, processes: int = 1, *, soft_limit: int | None = None) -> str | None:
    """Why ``concurrency`` attempts do not fit this process's open-file limit (None when they do)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0] if soft_limit is None else soft_limit
    need = descriptors_needed(concurrency, processes)
    if soft == resource.RLIM_INFINITY or need <= soft:
        return None
    return (
        f"concurrency: {concurrency} attempts in flight need about {need} open files per process "
        f"({processes} attempt process(es)), more than this green agent's limit of {soft} (RLIMIT_NOFILE): lower "
        "the concurrency, add --workers, or raise the limit (ulimit -n) before starting it"
    )


def check_descriptors(concurrency: int, processes: int = 1) -> None:
    """ConfigError naming ``concurrency`` when the battle's attempts do not fit the open-file limit."""
    if (problem := descriptor_problem(concurrency, processes)) is not None:
        raise ConfigError(problem)
