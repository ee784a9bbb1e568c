"""Shared test helpers: run an ASGI app on loopback (:mod:`tests.support.servers`) and a scripted
OpenAI-compatible server (:mod:`tests.support.fake_openai`)."""

TEST_OPERATOR_TOKEN = "arena-test-operator-token-0123456789"
"""The operator token of green agents that tests start in-process (a fixed value: tests pass it to clients)."""
