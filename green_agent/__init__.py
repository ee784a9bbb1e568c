"""The green agent: Arena's assessor. Four parts, each a package (docs/architecture.md has the picture):

- :mod:`green_agent.engine` the battle engine: one battle from config to summary (attempts, blame, the tau2 adapter,
  the A2A channel to the agent under test, results and the markdown report);
- :mod:`green_agent.statistics` pure statistics (pass^k / pass@k, intervals, comparisons, verdicts), no I/O;
- :mod:`green_agent.service` the entry points around the engine (A2A assessments, AgentBeats battles, MCP, the
  backend poster, the operator token);
- :mod:`green_agent.evaluations` the second product, dataset evaluations (Fair-Forge /run, ragas-style metrics, CSV
  suites) with their own scorers.

Shared by all four: :mod:`.text_safety` (hostile text made safe to store), :mod:`.body_limits` (bounded request
bodies), :mod:`.process_hygiene` (children die with their parent), :mod:`.llm_retry` (the retry budget of the LLM
user simulator and the LLM judge).

"The seed", in docstrings and docs, means the projects Arena replaces and stays compatible with: the tau-bench green
agent of the tau-bench-agents project for AgentBeats (its reply format, failure names, markdown wording and scenario
fields) and, for the evaluations, the Fair-Forge ``/run`` service and the FinAgent CSV evaluator.
"""
