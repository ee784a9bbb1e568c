"""The battle engine: one battle from config to summary, independent of how it was requested.

- :mod:`.config` the battle's settings; :mod:`.battle` runs every attempt with bounded concurrency and summarises;
  :mod:`.attempt` one attempt (white agent, simulated user, environment, scorer) and its blame;
  :mod:`.attribution` the rules that turn an early stop or a tau2 score into a failure category and author.
- :mod:`.channels` what an attempt needs from the agent under test, the user and the scorer (Protocols, so tests
  can drive one attempt with fakes); :mod:`.white_client` the A2A channel to the agent under test and
  :mod:`.capped_transport` its byte-capped replies;
  :mod:`.turn_protocol` parses its replies into actions.
- :mod:`.tau` the tau2-bench adapter (tasks, sandboxed environments, users, scoring workers).
- :mod:`.results`, :mod:`.events`, :mod:`.report` the battle as data, as live events and as markdown;
  :mod:`.explanation` why a scored attempt failed (computed by the scoring worker, :mod:`.tau.explain`).

The engine imports nothing of :mod:`green_agent.service` (the entry points) nor of :mod:`green_agent.evaluations`.
"""
