"""A fake white agent for ``arena run`` tests: accepts the white agent's command line, records it, serves a card.

``FAKE_WHITE_RECORD`` names a file that receives ``{"argv": [...], "pid": N}`` at start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--card-url", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fault-rate", nargs="+", action="extend", default=[])
    parser.add_argument("--model")
    parser.add_argument("--base-url")
    parser.add_argument("--api-key-env")
    parser.add_argument("--temperature", type=float)
    args = parser.parse_args()
    record = os.environ.get("FAKE_WHITE_RECORD")
    if record:
        Path(record).write_text(json.dumps({"argv": sys.argv[1:], "pid": os.getpid()}), encoding="utf-8")

    async def card(_: Request) -> JSONResponse:
        return JSONResponse({"name": "fake white", "url": args.card_url})

    app = Starlette(routes=[Route("/.well-known/agent-card.json", card)])
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
