"""A pool member in a process of its own, for the kill -9 test (test_pool_member.py): it leases up to CAPACITY
attempts, writes one line per attempt it holds to MARKER, and hangs on each until it is killed.

    python -m tests.green_agent.service.pool_member_process BACKEND_URL POOL WORKER CAPACITY TTL_S MARKER

The pool key comes in the environment (``ARENA_TEST_POOL_KEY``), never on the command line.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from green_agent.service.attempt_lease_client import AttemptLeaseClient
from green_agent.service.pool_member import PoolMember
from green_agent.wire.attempt_leases import LeaseOut

KEY_ENV = "ARENA_TEST_POOL_KEY"


async def main(url: str, pool: str, worker: str, capacity: int, ttl_s: float, marker: Path) -> None:
    async def hang(lease: LeaseOut) -> dict[str, Any]:
        with marker.open("a", encoding="utf-8") as out:  # a few bytes, once per attempt: fine on the loop here
            out.write(f"{lease.task_key} {lease.attempt}\n")
        await asyncio.Event().wait()
        return {}

    async with AttemptLeaseClient(url, pool, os.environ[KEY_ENV]) as client:
        await PoolMember(client, worker, hang, capacity=capacity, ttl_s=ttl_s, wait_s=1).run()


if __name__ == "__main__":
    url, pool, worker, capacity, ttl_s, marker = sys.argv[1:7]
    asyncio.run(main(url, pool, worker, int(capacity), float(ttl_s), Path(marker)))
