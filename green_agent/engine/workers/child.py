"""The worker side: ``python -m green_agent.engine.workers.child``, started by :class:`~.pool.WorkerPool`.

One event loop of its own holding everything an attempt borrows (green_agent/engine/attempt.py, ``AttemptDeps``):
an HTTP pool for the A2A channels, a tool-sandbox factory (its own fork server), scoring workers, the simulated
users. It reads :mod:`.protocol` messages on stdin and writes answers on a descriptor of its own (the original
stdout; fd 1 is pointed at stderr so nothing else can write into the stream). It dies with its parent
(``PR_SET_PDEATHSIG``) and on end of input; it ignores SIGINT and SIGTERM, which the terminal or a process-group
stop deliver to every process at once: the battle decides what an attempt cut off by a stop is (abandoned, not a
harness error) and then closes its workers.

Keep the imports below light: the sandbox fork server and the scoring workers re-import this main module.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys

log = logging.getLogger(__name__)


def main() -> int:
    protocol_fd = os.dup(1)
    os.dup2(2, 1)  # a stray print goes to stderr, never into the protocol stream
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from green_agent.process_hygiene import die_with_parent

    die_with_parent()
    gc.set_threshold(100_000, 50, 100)  # as the serving process (green_agent/service/main.py)
    level = os.environ.get("ARENA_WORKER_LOG_LEVEL", "WARNING").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s worker %(process)d %(name)s: %(message)s")
    from green_agent.engine.workers.serve import serve

    asyncio.run(serve(protocol_fd))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
