"""Shared test helpers: run an ASGI app on loopback (:mod:`tests.support.servers`) and a scripted
OpenAI-compatible server (:mod:`tests.support.fake_openai`)."""
