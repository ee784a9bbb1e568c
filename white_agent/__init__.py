"""Reference white agents (agents under test) for the Arena harness.

Three agents speak the harness turn protocol over A2A (see :mod:`white_agent.protocol`):

* ``replay``  (:mod:`white_agent.replay`) performs a tau2 task's gold actions; used for calibration battles.
* ``flaky``   (:mod:`white_agent.flaky`) is replay with seeded fault injection, so every failure category of the
  harness can be produced on purpose.
* ``llm``     (:mod:`white_agent.llm`) is a tool-calling agent over any OpenAI-compatible endpoint.

This package is a standalone example of a white agent: it never imports ``green_agent``.
"""

from white_agent.errors import WhiteAgentConfigError

__all__ = ["WhiteAgentConfigError"]
