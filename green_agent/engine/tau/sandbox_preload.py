"""What the tool sandboxes' fork server imports before it forks any sandbox (its ``set_forkserver_preload``).

Why a module of its own: the fork server should pay its warm-up (tau2's imports, every domain's template databases
and tool schemas: :mod:`green_agent.engine.tau.sandbox_child`) with the garbage collector off, since those hundreds
of thousands of objects live as long as the server, and then freeze them out of every later collection, so that no
sandbox forked from it ever scans (and thereby copies) those pages. Doing this in ``sandbox_child`` itself would
switch the collector off in every process that imports it (tests do). The collector stays off in the fork server,
which only forks; each sandbox turns it back on (:func:`green_agent.engine.tau.sandbox_child.serve`).
"""

from __future__ import annotations

import gc

gc.disable()

import green_agent.engine.tau.sandbox_child  # noqa: E402, F401  (the warm-up)

gc.freeze()
