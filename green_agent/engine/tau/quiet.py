"""Import hygiene for tau2: call :func:`quiet_tau2` before the first ``import tau2...``.

Why: importing tau2 has side effects that do not belong in a server.

* litellm (pulled in by tau2's evaluator and registry) downloads a model price map at import time unless
  ``LITELLM_LOCAL_MODEL_COST_MAP`` is set;
* tau2 logs through loguru straight to stderr at DEBUG level (every tool response, every step);
* ``tau2.utils.utils`` runs ``load_dotenv()`` at import time, which searches the directories above the installed
  package for a ``.env`` file, copies whatever it finds into ``os.environ`` and warns "No .env file found"
  otherwise. A harness that reads API keys from named environment variables must not have them appear from a
  file nobody mentioned, so that one import runs with ``PYTHON_DOTENV_DISABLED`` set (and the variable is
  restored afterwards, so nothing else in the process or its children is affected).
"""

from __future__ import annotations

import importlib
import os
import threading
import warnings

from loguru import logger

_lock = threading.Lock()
_quieted = False  # process-wide and one-way: it only records that the import side effects were handled


def quiet_tau2() -> None:
    """Make importing and running tau2 quiet and side-effect free. Idempotent and thread-safe."""
    global _quieted
    if _quieted:
        return
    with _lock:
        if _quieted:
            return
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        logger.disable("tau2")
        previous = os.environ.get("PYTHON_DOTENV_DISABLED")
        os.environ["PYTHON_DOTENV_DISABLED"] = "1"
        try:
            # The module whose import calls load_dotenv(); importing it now, with loading disabled, means the
            # call never happens again in this process (modules are imported once).
            with warnings.catch_warnings():
                # Upstream tau2 v1.0.x imports its voice code (and with it the stdlib's audioop, deprecated since
                # Python 3.11) from tau2/__init__.py: a warning about tau2's code, not the caller's.
                warnings.filterwarnings("ignore", message=".*audioop.*", category=DeprecationWarning)
                importlib.import_module("tau2.utils.utils")
        finally:
            if previous is None:
                os.environ.pop("PYTHON_DOTENV_DISABLED", None)
            else:
                os.environ["PYTHON_DOTENV_DISABLED"] = previous
        _quieted = True
