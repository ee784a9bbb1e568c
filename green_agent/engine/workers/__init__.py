"""Attempts over several worker processes of the green agent on one machine (issue 27; docs/design/workers.md).

The battle that owns the run directory, the journal, the events and the statistics hands attempts, one (task,
attempt number) at a time, to worker processes that each run their own event loop, A2A clients, tool sandboxes,
simulated users and scoring workers; results come back as :class:`~green_agent.engine.results.AttemptResult` JSON
and are recorded by the battle alone (one writer). :mod:`.protocol` is what crosses the process boundary,
:mod:`.pool` the battle's side, :mod:`.child` the worker's.
"""
