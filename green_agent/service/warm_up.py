"""Start-up work the green agent does after it is already serving.

Why in the background: ``/health`` and the agent card must answer within a second or two of the process starting
(``arena run`` waits for them before it sends the battle), while the scoring workers, the tool sandboxes' fork
server and the statistics library take seconds of CPU to get ready. None of that is needed to accept a request, so
it runs after the server is up; an attempt that needs a scoring worker before it is warm waits in the pool's
queue, and the summary's first interval imports scipy itself if the warm-up has not done it yet.

A failed warm-up is logged, never fatal: the same work is retried on first use, where its error reaches the battle
that needed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging

from green_agent.engine.tau.scoring import ScoringPool

log = logging.getLogger(__name__)

LIBRARIES = ("scipy.stats",)
"""Imported in a worker thread after the scoring pool started: the summary's intervals need them (~1 s of import)."""


async def warm_up(scoring: ScoringPool) -> None:
    """Start the scoring workers, then import the libraries the summary needs, off the event loop."""
    try:
        await scoring.start()
    except Exception:
        log.warning("starting the scoring workers in the background failed; the first score will retry", exc_info=True)
    for name in LIBRARIES:
        try:
            await asyncio.to_thread(importlib.import_module, name)
        except Exception:
            log.warning("importing %s in the background failed", name, exc_info=True)


async def cancel_and_wait(task: asyncio.Task[None]) -> None:
    """Stop a background task at shutdown and wait until it has stopped."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
