"""What crosses a process boundary between the green agent and the others, in one package.

- :mod:`~green_agent.wire.agentbeats`: the AgentBeats battle messages (``battle_info`` / ``battle_start``) and the
  reason codes of a battle that could not start;
- :mod:`~green_agent.wire.backend_posts`: the bodies posted to a battle backend (one progress post per event, the
  result post), shared by the live reporter and ``arena view``;
- :mod:`~green_agent.wire.trajectory`: an attempt's trajectory as posted with its event (``arena.trajectory/1``);
- :mod:`~green_agent.wire.assessment`: the assessment request ``arena run`` sends and the "Result" artifact it reads
  back (markdown + result JSON), one model for the launcher and the service;
- :mod:`~green_agent.wire.process`: the environment variable and run-directory file names both sides use.

The progress events themselves and the Result artifact's data are the engine's typed models
(:mod:`green_agent.engine.events`, docs/events.schema.json; :mod:`green_agent.engine.results`,
docs/summary.schema.json). The service and the launcher import this package; the launcher imports nothing of
the service (tests/architecture/test_launcher_surface.py). It imports nothing of the service either.
"""
