"""The finance demo white agent: four deterministic local tools and an agent (scripted or llm) that reports its
tool calls as a ``{"tool_calls": [...]}`` data part (see docs/evaluations.md)."""
