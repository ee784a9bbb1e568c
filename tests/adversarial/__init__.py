"""Adversarial end-to-end tests: the real green agent (a subprocess) against a hostile white agent.

Layout:
    hostile_agent.py   a hostile A2A 0.3 white agent on raw Starlette (NOT the a2a-sdk server), served by uvicorn in
                       a background thread; what it answers is a behaviour set per test (a function of the turn)
    harness.py         the green agent and the reference replay agent as subprocesses (own session, free port,
                       stopped with their whole process tree), the operator's client (assessment over raw A2A 0.3
                       JSON-RPC + SSE, raw MCP), /health latency polling, RSS sampling, process-tree helpers
    conftest.py        fixtures: a shared green agent (restarted when a test left it unhealthy), dedicated green
                       agents for the tests that may wedge or kill one, the hostile agent, the replay agent
    test_*.py          the checks (see each module's docstring)

Run:  .venv/bin/python -m pytest -q -p no:cacheprovider tests/adversarial        (add -s for the measured figures;
      -m "not slow" skips the dedicated-green-agent tests and the property test)
      ARENA_ADVERSARIAL_GREEN_SOURCE=/path/to/checkout  runs the green agent from another source tree (a directory
      that holds ``green_agent/``), e.g. an export of HEAD, to tell harness problems from work in progress.
"""
