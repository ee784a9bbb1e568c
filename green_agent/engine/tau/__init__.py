"""The environment adapter: everything the green agent knows about tau2-bench lives in this package.

Why a package of its own: the rest of the green agent talks to tau2 only through these modules (tasks, one
environment per attempt, scoring in worker processes, simulated users), so replacing the benchmark later means a
new adapter, not edits across the code.

Import cost matters on the serving path: this ``__init__`` imports nothing from tau2. Import the submodule you
need (``green_agent.engine.tau.tasks``, ``.environment``, ``.scoring``, ``.users``); each calls
:func:`green_agent.engine.tau.quiet.quiet_tau2` before it touches tau2. Nothing here imports tau2's registry or
``evaluator.py`` (they pull in litellm, ~4 s): scoring calls tau2's evaluators one by one (``.evaluation``).
"""
