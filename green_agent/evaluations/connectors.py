"""The seed's ``connector`` block, mapped onto OpenAI-compatible endpoints without importing anything it names.

Fair-Forge's Lambda instantiates ``connector.class_path`` with ``importlib`` (a LangChain chat model class) and passes
``connector.params`` to its constructor. Importing a user-supplied dotted name on a server is remote code loading, so
here the class path is only a *label*: the four class paths the seed documents are mapped to the OpenAI-compatible
endpoint of the same provider and everything else is refused.

    langchain_groq.chat_models.ChatGroq                          -> https://api.groq.com/openai/v1
    langchain_openai.chat_models.ChatOpenAI                      -> https://api.openai.com/v1
    langchain_google_genai.chat_models.ChatGoogleGenerativeAI    -> https://generativelanguage.googleapis.com/v1beta/openai/
    langchain_ollama.chat_models.ChatOllama                      -> http://localhost:11434/v1 (no key needed)

``params.api_key`` (or the provider's own alias such as ``groq_api_key``) falls back to the ``LLM_API_KEY`` environment
variable, as in the seed. The key is held as a :class:`pydantic.SecretStr`; no message, log line or result built here
ever contains it (see :func:`redact`).

``params.base_url`` (LangChain's ``base_url`` / ``openai_api_base``) is honoured only when the caller allows it
(``allow_base_url``): a public server that sent a user's key to a user-chosen URL would be an open relay. Operators
point a provider at another endpoint with ``base_url_overrides`` instead (tests use it for the scripted server).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

API_KEY_ENV = "LLM_API_KEY"
"""The seed's fallback key variable."""


@dataclass(frozen=True)
class Provider:
    """One supported connector class path and the OpenAI-compatible endpoint it maps to."""

    name: str
    class_path: str
    base_url: str
    needs_key: bool
    key_aliases: tuple[str, ...]


PROVIDERS: tuple[Provider, ...] = (
    Provider(
        "groq",
        "langchain_groq.chat_models.ChatGroq",
        "https://api.groq.com/openai/v1",
        True,
        ("api_key", "groq_api_key"),
    ),
    Provider(
        "openai",
        "langchain_openai.chat_models.ChatOpenAI",
        "https://api.openai.com/v1",
        True,
        ("api_key", "openai_api_key"),
    ),
    Provider(
        "gemini",
        "langchain_google_genai.chat_models.ChatGoogleGenerativeAI",
        "https://generativelanguage.googleapis.com/v1beta/openai/",
        True,
        ("api_key", "google_api_key"),
    ),
    Provider("ollama", "langchain_ollama.chat_models.ChatOllama", "http://localhost:11434/v1", False, ("api_key",)),
)
SUPPORTED_CLASS_PATHS: tuple[str, ...] = tuple(p.class_path for p in PROVIDERS)
_BY_CLASS_PATH = {p.class_path: p for p in PROVIDERS}
# Short aliases accepted from the command line (``--judge-provider groq``); never needed in /run requests.
_BY_NAME = {p.name: p for p in PROVIDERS}
_HEADER_SAFE = re.compile(r"[\x21-\x7e]{1,4096}")
"""What an API key may be: it travels in an HTTP header (printable ASCII, no spaces or line breaks)."""
MAX_MODEL_CHARS = 256


class ConnectorError(ValueError):
    """The connector block cannot be turned into a judge endpoint; the message never contains a key."""


@dataclass(frozen=True)
class ResolvedConnector:
    """Where and how the LLM judge calls its model. ``api_key`` is secret: use ``.get_secret_value()`` only to call."""

    provider: str
    class_path: str
    model: str
    base_url: str
    api_key: SecretStr
    requested_temperature: float | None

    def __repr__(self) -> str:  # the dataclass repr would be safe (SecretStr), but make it explicit and short
        return f"ResolvedConnector(provider={self.provider!r}, model={self.model!r}, base_url={self.base_url!r})"

    def public(self) -> dict[str, Any]:
        """What results may show about the connector (never the key)."""
        return {
            "provider": self.provider,
            "class_path": self.class_path,
            "model": self.model,
            "base_url": self.base_url,
        }


def provider_for(name_or_class_path: str) -> Provider | None:
    """The provider for a documented class path or a short name (groq, openai, gemini, ollama)."""
    return _BY_CLASS_PATH.get(name_or_class_path) or _BY_NAME.get(name_or_class_path)


def _ollama_base(url: str) -> str:
    """LangChain's ChatOllama takes the server root (http://host:11434); the OpenAI-compatible API is under /v1."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def resolve_connector(
    connector: Mapping[str, Any],
    *,
    environ: Mapping[str, str] | None = None,
    base_url_overrides: Mapping[str, str] | None = None,
    allow_base_url: bool = False,
    require_key: bool = True,
) -> ResolvedConnector:
    """Validate a seed ``connector`` block and map it to an OpenAI-compatible endpoint.

    Raises :class:`ConnectorError` (message names the field, never echoes a key) for an unsupported class path, a
    missing model, a missing key for a provider that needs one, or params of the wrong type. ``class_path`` missing
    is the caller's check (the seed has a distinct message for it). ``require_key=False`` (the lexical judge will
    score, so the connector is validated but never called) accepts a missing key.
    """
    class_path = connector.get("class_path")
    if not isinstance(class_path, str) or not class_path.strip():
        raise ConnectorError("connector.class_path is required")
    provider = provider_for(class_path.strip())
    if provider is None:
        raise ConnectorError(
            f"unsupported connector.class_path {class_path.strip()[:200]!r}; "
            f"supported: {', '.join(SUPPORTED_CLASS_PATHS)}"
        )
    params = connector.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise ConnectorError("connector.params must be a JSON object")
    model = params.get("model", params.get("model_name"))
    if not isinstance(model, str) or not model.strip():
        raise ConnectorError("connector.params.model is required (a model name, e.g. llama-3.3-70b-versatile)")
    if len(model) > MAX_MODEL_CHARS:
        raise ConnectorError(f"connector.params.model is longer than {MAX_MODEL_CHARS} characters")
    temperature = params.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))):
        raise ConnectorError("connector.params.temperature must be a number")
    if temperature is not None:
        try:
            temperature = float(temperature)  # an integer of hundreds of digits overflows a float
        except OverflowError:
            temperature = math.inf
        if not math.isfinite(temperature):
            raise ConnectorError("connector.params.temperature must be a finite number")

    key: str | None = None
    for alias in provider.key_aliases:
        value = params.get(alias)
        if value is not None and not isinstance(value, str):
            raise ConnectorError(f"connector.params.{alias} must be a string")
        if value:
            if not _HEADER_SAFE.fullmatch(value):  # never echo it: say what is wrong, not what was sent
                raise ConnectorError(
                    f"connector.params.{alias} must be printable ASCII without spaces (at most 4096 characters)"
                )
            key = value
            break
    if not key:
        key = (os.environ if environ is None else environ).get(API_KEY_ENV) or None
    if not key:
        if provider.needs_key and require_key:
            raise ConnectorError(
                f"no API key for {provider.name}: set connector.params.api_key or the {API_KEY_ENV} "
                "environment variable"
            )
        key = "unused"  # the openai client insists on a key; Ollama ignores it (and the lexical judge calls nothing)

    base_url = provider.base_url
    overrides = base_url_overrides or {}
    override = overrides.get(provider.name) or overrides.get(provider.class_path)
    requested = params.get("base_url") or params.get("openai_api_base")
    if requested is not None and not isinstance(requested, str):
        raise ConnectorError("connector.params.base_url must be a string")
    if override:
        base_url = override
    elif requested:
        if not allow_base_url:
            raise ConnectorError(
                "connector.params.base_url is not accepted by this server (it would send the key to a URL chosen by "
                "the request); the operator can configure endpoints instead"
            )
        if not requested.startswith(("http://", "https://")):
            raise ConnectorError("connector.params.base_url must start with http:// or https://")
        base_url = _ollama_base(requested) if provider.name == "ollama" else requested
    return ResolvedConnector(
        provider=provider.name,
        class_path=provider.class_path,
        model=model.strip(),
        base_url=base_url,
        api_key=SecretStr(key),
        requested_temperature=float(temperature) if temperature is not None else None,
    )


def redact(text: str, *secrets: SecretStr | str | None) -> str:
    """``text`` with every occurrence of the given secrets replaced by ``***`` (for error reasons from upstream)."""
    for secret in secrets:
        value = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text
