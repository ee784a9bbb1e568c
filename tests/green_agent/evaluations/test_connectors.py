"""Connector compatibility: the four documented class paths map to OpenAI-compatible endpoints, anything else is
refused, LLM_API_KEY is the fallback key, and the key never shows."""

from __future__ import annotations

import pytest

from green_agent.evaluations import SUPPORTED_CLASS_PATHS, ConnectorError, resolve_connector
from green_agent.evaluations.connectors import redact

KEY = "sk-super-secret-value-42"


@pytest.mark.parametrize(
    "class_path, provider, base_url",
    [
        ("langchain_groq.chat_models.ChatGroq", "groq", "https://api.groq.com/openai/v1"),
        ("langchain_openai.chat_models.ChatOpenAI", "openai", "https://api.openai.com/v1"),
        (
            "langchain_google_genai.chat_models.ChatGoogleGenerativeAI",
            "gemini",
            "https://generativelanguage.googleapis.com/v1beta/openai/",
        ),
        ("langchain_ollama.chat_models.ChatOllama", "ollama", "http://localhost:11434/v1"),
    ],
)
def test_documented_class_paths_map_to_openai_compatible_endpoints(
    class_path: str, provider: str, base_url: str
) -> None:
    resolved = resolve_connector(
        {"class_path": class_path, "params": {"model": "m", "api_key": KEY, "temperature": 0.3}}, environ={}
    )
    assert (resolved.provider, resolved.base_url, resolved.model) == (provider, base_url, "m")
    assert resolved.api_key.get_secret_value() == KEY
    assert resolved.requested_temperature == 0.3
    assert KEY not in repr(resolved) and KEY not in str(resolved.public())
    assert class_path in SUPPORTED_CLASS_PATHS


@pytest.mark.parametrize(
    "class_path", ["os.system", "langchain_groq.chat_models.ChatGroqX", "builtins.eval", "subprocess.Popen"]
)
def test_other_class_paths_are_refused_without_importing(class_path: str) -> None:
    with pytest.raises(ConnectorError, match=r"unsupported connector\.class_path"):
        resolve_connector({"class_path": class_path, "params": {"model": "m", "api_key": KEY}}, environ={})


def test_llm_api_key_is_the_fallback() -> None:
    block = {"class_path": "langchain_groq.chat_models.ChatGroq", "params": {"model": "m"}}
    assert resolve_connector(block, environ={"LLM_API_KEY": KEY}).api_key.get_secret_value() == KEY
    with pytest.raises(ConnectorError, match=r"set connector\.params\.api_key or the LLM_API_KEY"):
        resolve_connector(block, environ={})
    assert resolve_connector(block, environ={}, require_key=False).provider == "groq"


def test_ollama_needs_no_key_and_its_base_url_gets_v1() -> None:
    block = {
        "class_path": "langchain_ollama.chat_models.ChatOllama",
        "params": {"model": "llama3", "base_url": "http://ollama:11434"},
    }
    with pytest.raises(ConnectorError, match="base_url is not accepted by this server"):
        resolve_connector(block, environ={})
    resolved = resolve_connector(block, environ={}, allow_base_url=True)
    assert resolved.base_url == "http://ollama:11434/v1"


def test_operator_overrides_win() -> None:
    block = {"class_path": "langchain_openai.chat_models.ChatOpenAI", "params": {"model": "m", "api_key": KEY}}
    resolved = resolve_connector(block, environ={}, base_url_overrides={"openai": "http://127.0.0.1:9/v1"})
    assert resolved.base_url == "http://127.0.0.1:9/v1"


def test_errors_never_contain_the_key() -> None:
    bad = [
        {"class_path": "x.Y", "params": {"api_key": KEY, "model": "m"}},
        {"class_path": "langchain_groq.chat_models.ChatGroq", "params": {"api_key": KEY}},
        {
            "class_path": "langchain_groq.chat_models.ChatGroq",
            "params": {"api_key": KEY, "model": "m", "temperature": KEY},
        },
        {"class_path": "langchain_groq.chat_models.ChatGroq", "params": KEY},
    ]
    for block in bad:
        with pytest.raises(ConnectorError) as caught:
            resolve_connector(block, environ={})
        assert KEY not in str(caught.value)


def test_redact() -> None:
    assert redact(f"Incorrect API key provided: {KEY}.", KEY) == "Incorrect API key provided: ***."
