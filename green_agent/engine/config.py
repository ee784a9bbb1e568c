"""Battle configuration: one pydantic model tree for TOML scenarios and A2A request configs.

Why one schema: a scenario file and an assessment request's ``config`` describe the same battle, so they are
validated by the same models and fail with the same field-naming messages. The launcher reads the whole scenario
(:mod:`launcher.cli.scenario`); the green agent only needs :class:`BattleConfig` (the ``[pass_k_config]`` table plus
the user simulator), which is what travels inside a request.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from green_agent.engine.battle_limits import BattleLimits
from green_agent.engine.field_hints import describe_problem

KNOWN_DOMAINS: tuple[str, ...] = ("retail", "airline", "telecom", "mock", "banking_knowledge")
"""tau2 domains the harness can drive (``mock`` and ``banking_knowledge``, upstream tau2 only, have no splits)."""

MAX_K = 64
"""Largest k a battle may ask for (attempts per task)."""

OPERATOR_ONLY_USER_FIELDS: tuple[str, ...] = ("base_url", "api_key_env", "model")
"""User-simulator fields only the operator sets (flags, environment, local scenario): a remote request naming an
endpoint or an environment variable could make the green agent send one of its secrets to anyone."""

OPERATOR_CAPPED_USER_FIELDS: tuple[str, ...] = ("max_retries", "max_user_turns", "request_timeout_s")
"""User-simulator fields that spend the operator's money or time (LLM calls per attempt, how long one may take): a
remote config may lower them, never raise them above the operator's value."""
OPERATOR_CAPPED_FIELDS: tuple[str, ...] = ("max_reply_bytes",)
"""Battle fields that size what the green agent holds per attempt: a remote config may lower them, never raise them
above the operator's value."""

MAX_TURN_TIMEOUT_S = 1800.0
"""Longest ``turn_timeout_s``: one white-agent turn (30 min)."""
MAX_ATTEMPT_TIMEOUT_S = 14_400.0
"""Longest ``attempt_timeout_s``: one attempt (4 h)."""
MAX_TOOL_TIMEOUT_S = 120.0
"""Longest ``tool_timeout_s``: one tool call."""
MAX_USER_REQUEST_TIMEOUT_S = 600.0
"""Longest ``user_simulator.request_timeout_s``: one request to the LLM user's endpoint."""
MAX_NUM_TASKS = 10_000
"""Most tasks ``num_tasks`` may ask for (the largest split, telecom ``full``, has 2285)."""
MAX_TASK_INDICES = 10_000
"""Longest ``task_index`` list."""
MAX_SEED = 2**63 - 1
"""Largest seed (a seed is an integer a 64-bit store can hold)."""
MAX_SPLIT_CHARS = 64
"""Longest split name."""
DEFAULT_MAX_ATTEMPTS_PER_BATTLE = 2000
"""tasks x k a green agent accepts per battle unless its operator says otherwise (``arena-green --max-attempts``)."""
DEFAULT_MAX_REMOTE_CONCURRENCY, MAX_CONCURRENCY = 16, 1024
"""A remote config's attempts in flight unless the operator says otherwise (``--max-concurrency``); any battle's."""

RENAMED_FIELDS: dict[str, str] = {"task_id": "task_index", "num_battles": "num_tasks"}
"""Battle-config fields under their seed names (still accepted on input) -> the names they have now (and output)."""


class ConfigError(ValueError):
    """A configuration problem, with a message that names the field and the allowed values."""


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UserSimulatorConfig(StrictModel):
    """Who plays the customer.

    ``scripted`` needs no network and is deterministic; ``llm`` talks to any OpenAI-compatible endpoint. The API key
    is never part of the config: only the *name* of the environment variable that holds it.
    """

    kind: Literal["scripted", "llm"] = "scripted"
    model: str = "gpt-4.1-mini"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    max_retries: int = Field(default=4, ge=0, le=20)
    request_timeout_s: float = Field(default=60.0, gt=0, le=MAX_USER_REQUEST_TIMEOUT_S, allow_inf_nan=False)
    max_user_turns: int = Field(default=12, ge=1, le=200)


MAX_PRICED_MODELS = 64
"""Most entries of a price table (:attr:`BattleConfig.prices`)."""
MAX_MODEL_NAME_CHARS = 200
"""Longest model name in a price table."""


class ModelPrice(StrictModel):
    """What one model costs, in US dollars per million tokens (the provider's list price; Arena ships none, because
    prices change and a stale built-in table would print wrong costs with confidence)."""

    input_usd_per_million_tokens: float = Field(ge=0, le=1_000_000, allow_inf_nan=False)
    """Prompt (input) tokens."""
    output_usd_per_million_tokens: float = Field(ge=0, le=1_000_000, allow_inf_nan=False)
    """Completion (output) tokens."""

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The price of that many tokens."""
        return (
            prompt_tokens * self.input_usd_per_million_tokens + completion_tokens * self.output_usd_per_million_tokens
        ) / 1_000_000


class CertifyConfig(StrictModel):
    """``certify`` in ``[pass_k_config]``: stop the battle once "pass^j >= threshold" is decided (issue 28).

    Written as a table (``certify = { metric = "pass^4", threshold = 0.8 }``) or a string (``certify =
    "pass^4>=0.8"``). The battle visits its tasks in a seeded order and stops when the anytime-valid confidence
    sequence lies wholly above the threshold (certified), wholly below (refuted), or the budget is spent
    (inconclusive); see docs/metrics.md, "Certify early". Against a baseline run (``compare``):
    ``"pass^1>=baseline-0.05"`` (no worse by more than the margin) or ``"pass^1>baseline+0.05"`` (better by more),
    ``baseline`` the run directory (``arena run --certify-baseline DIR``), tasks paired by key as in ``arena
    compare``. A remote request carries ``baseline_values``; the green agent never opens ``baseline`` (a label).
    """

    metric: str = Field(pattern=r"^pass\^[1-9][0-9]*$")
    """``pass^j`` with j <= k (``pass^1`` is the mean success rate)."""
    threshold: float | None = Field(default=None, gt=0.0, lt=1.0, allow_inf_nan=False)
    confidence: float = Field(default=0.95, ge=0.5, le=0.999, allow_inf_nan=False)
    max_attempts: int | None = Field(default=None, ge=1)
    """Budget of attempts (default: the scenario's tasks x k); whole tasks only (rounded down to a multiple of k)."""
    compare: Literal["no_worse", "better"] | None = None
    """A comparison with ``baseline`` instead of a threshold."""
    margin: float = Field(default=0.0, ge=0.0, lt=1.0, allow_inf_nan=False)
    baseline: str | None = Field(default=None, min_length=1, max_length=4096)
    """The baseline's run directory (comparisons only): ``arena run`` reads it into ``baseline_values``; the green
    agent never opens it (a remote request names no path the green agent would read)."""
    baseline_values: dict[str, float] | None = Field(default=None, max_length=MAX_NUM_TASKS)
    """Comparisons: the baseline's per-task pass^j (task key -> value in [0, 1]), paired by task key."""

    @field_validator("baseline_values")
    @classmethod
    def _unit_values(cls, values: dict[str, float] | None) -> dict[str, float] | None:
        for key, value in (values or {}).items():
            if len(key) > 512 or not (0.0 <= value <= 1.0):
                raise ValueError(f"{key[:60]!r}: each value must lie in [0, 1] under a key of at most 512 characters")
        return values

    @model_validator(mode="before")
    @classmethod
    def _from_claim(cls, data: Any) -> Any:
        if not isinstance(data, str):
            return data
        text = data.replace(" ", "")
        bad = f"expected a claim like 'pass^4>=0.8', 'pass^1>=baseline-0.05' or 'pass^1>baseline', got {data!r}"
        for op, kind in ((">=baseline", "no_worse"), (">baseline", "better")):
            metric, sep, rest = text.partition(op)
            if sep:
                if rest and rest[0] != ("-" if kind == "no_worse" else "+"):
                    raise ValueError(bad)
                try:
                    margin = abs(float(rest)) if rest else 0.0
                except ValueError:
                    raise ValueError(bad) from None
                return {"metric": metric, "compare": kind, "margin": margin}
        metric, sep, threshold = text.partition(">=")
        if not sep:
            raise ValueError(bad)
        try:
            return {"metric": metric, "threshold": float(threshold)}
        except ValueError:
            raise ValueError(bad) from None

    @model_validator(mode="after")
    def _threshold_or_baseline(self) -> CertifyConfig:
        if self.compare is None and self.threshold is None:
            raise ValueError("threshold: required (or compare with a baseline)")
        if self.compare is not None and self.threshold is not None:
            raise ValueError("threshold: not with compare (the baseline is the reference)")
        if self.compare is None and (self.baseline is not None or self.baseline_values is not None):
            raise ValueError("baseline: only with compare")
        return self

    @property
    def j(self) -> int:
        """The j of pass^j."""
        return int(self.metric.removeprefix("pass^"))

    @property
    def decision_threshold(self) -> float:
        """The threshold the confidence sequence is checked at: ``threshold``, or for a comparison the bound on
        the paired difference d in [-1, 1] (-margin no worse, +margin better) on the scale (d + 1) / 2."""
        if self.compare is None:
            assert self.threshold is not None
            return self.threshold
        bound = -self.margin if self.compare == "no_worse" else self.margin
        return (bound + 1.0) / 2.0

    @property
    def claim(self) -> str:
        if self.compare == "no_worse":
            return f"{self.metric} >= baseline - {self.margin:g}"
        if self.compare == "better":
            return f"{self.metric} > baseline + {self.margin:g}"
        return f"{self.metric} >= {self.threshold:g}"


class BattleConfig(StrictModel, BattleLimits):  # budgets + provider cap: green_agent/engine/battle_limits.py
    """The ``[pass_k_config]`` table plus the harness's extensions.

    mode:
      ``manual``  the task(s) named by ``task_index`` (0-based index into ``split``) of ``domain``;
      ``random``  ``num_tasks`` distinct tasks sampled without replacement (seeded) across the domains;
      ``all``     every task of the split of each domain (calibration sweeps, benchmarks).

    The seed's names of two fields are accepted on input (:data:`RENAMED_FIELDS`): ``task_id`` for ``task_index``
    (it is an index, not tau2's task id) and ``num_battles`` for ``num_tasks`` (it counts tasks, not battles).
    Output (``model_dump``, summary.json's ``config``, remote configs) uses the new names.
    """

    mode: Literal["manual", "random", "all"] = "manual"
    k: int = Field(default=4, le=MAX_K)
    domain: str | list[str] = "retail"
    task_index: int | list[int] = Field(default=0, validation_alias=AliasChoices("task_index", "task_id"))
    num_tasks: int = Field(default=1, ge=1, le=MAX_NUM_TASKS, validation_alias=AliasChoices("num_tasks", "num_battles"))
    split: str = Field(default="test", max_length=MAX_SPLIT_CHARS)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    max_steps: int = Field(default=30, ge=1, le=1000)
    turn_timeout_s: float = Field(default=120.0, gt=0, le=MAX_TURN_TIMEOUT_S, allow_inf_nan=False)
    attempt_timeout_s: float = Field(default=900.0, gt=0, le=MAX_ATTEMPT_TIMEOUT_S, allow_inf_nan=False)
    concurrency: int = Field(default=4, ge=1, le=MAX_CONCURRENCY)
    calibration: bool = False
    retrieval: str | None = Field(default=None, max_length=64, exclude_if=lambda retrieval: retrieval is None)
    tool_mode: Literal["text", "mcp"] = "text"
    """``text``: tools listed in the first message, called as <json> actions. ``mcp``: the attempt's tools are served
    on an MCP endpoint of its own (URL + bearer token in the first message); replies are ``respond`` actions."""
    tool_timeout_s: float = Field(default=5.0, gt=0, le=MAX_TOOL_TIMEOUT_S, allow_inf_nan=False)
    """Wall-clock bound of one tool call (tools run in a killable process of the attempt's own); a call that
    exceeds it ends the attempt as the agent's ``timeout``."""
    max_reply_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576)  # per turn; larger: format_error
    certify: CertifyConfig | None = Field(default=None, exclude_if=lambda certify: certify is None)
    """Stop early once the claim is decided (:class:`CertifyConfig`); absent: the fixed design runs every attempt."""
    user_simulator: UserSimulatorConfig = UserSimulatorConfig()
    prices: dict[str, ModelPrice] = Field(default_factory=dict, exclude_if=lambda prices: not prices)
    """Model name -> price (``[pass_k_config.prices."gpt-4.1-mini"]``): what the battle's token counts cost
    (green_agent/engine/costs.py). Only reports use it; it never changes a verdict, so a remote request may set it
    (it replaces the operator's table). Left out of the JSON when empty, so older configs read and write as before."""

    @field_validator("prices")
    @classmethod
    def _prices_bounded(cls, prices: dict[str, ModelPrice]) -> dict[str, ModelPrice]:
        if len(prices) > MAX_PRICED_MODELS:
            raise ValueError(f"prices: at most {MAX_PRICED_MODELS} models (got {len(prices)})")
        for name in prices:
            if not name or len(name) > MAX_MODEL_NAME_CHARS:
                raise ValueError(f"prices: a model name must have 1 to {MAX_MODEL_NAME_CHARS} characters")
        return prices

    @field_validator("k")
    @classmethod
    def _k_even(cls, k: int) -> int:
        if k < 2 or k % 2:
            raise ValueError(f"k must be even and >= 2 (got {k})")
        return k

    @field_validator("domain")
    @classmethod
    def _domain_known(cls, domain: str | list[str]) -> str | list[str]:
        names = [domain] if isinstance(domain, str) else domain
        if not names:
            raise ValueError(f"domain must name at least one of {', '.join(KNOWN_DOMAINS)}")
        for name in names:
            if name not in KNOWN_DOMAINS:
                raise ValueError(f"unknown domain {name!r}; known domains: {', '.join(KNOWN_DOMAINS)}")
        if len(set(names)) != len(names):
            raise ValueError("domain lists a domain twice")
        return domain

    @model_validator(mode="before")
    @classmethod
    def _one_name_per_field(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for old, new in RENAMED_FIELDS.items():
                if old in data and new in data:
                    raise ValueError(f"{new} and {old} (its old name) are both given; keep {new}")
        return data

    @field_validator("task_index")
    @classmethod
    def _task_indices_non_negative(cls, task_index: int | list[int]) -> int | list[int]:
        indices = [task_index] if isinstance(task_index, int) else task_index
        if not indices:
            raise ValueError("task_index (task_id) must name at least one task index")
        if len(indices) > MAX_TASK_INDICES:
            raise ValueError(f"task_index (task_id) lists at most {MAX_TASK_INDICES} tasks (got {len(indices)})")
        if any(i < 0 for i in indices):
            raise ValueError("task_index (task_id) is a 0-based index and must be >= 0")
        return task_index

    @model_validator(mode="after")
    def _manual_single_domain(self) -> BattleConfig:
        if self.mode == "manual" and not isinstance(self.domain, str):
            raise ValueError("domain: manual mode takes one domain (use mode = 'random' or 'all' for several)")
        if self.certify is not None and self.certify.j > self.k:
            raise ValueError(f"certify.metric: {self.certify.metric} needs j <= k (k = {self.k})")
        return self

    def planned_attempts(self) -> int | None:
        """tasks x k when it is known without loading tasks (manual and random mode); None for mode "all"."""
        if self.mode == "manual":
            return len(self.task_indices) * self.k
        if self.mode == "random":
            return self.num_tasks * self.k
        return None

    @property
    def domains(self) -> list[str]:
        """The domain(s) as a list."""
        return [self.domain] if isinstance(self.domain, str) else list(self.domain)

    @property
    def task_indices(self) -> list[int]:
        """The manual-mode task index/indices as a list."""
        return [self.task_index] if isinstance(self.task_index, int) else list(self.task_index)


def format_validation_error(error: ValidationError, *, prefix: str = "", root: type[BaseModel] | None = None) -> str:
    """One line per problem: ``field.path: message`` (what users need to fix the file); ``prefix`` is the path of
    the validated object inside the file. With ``root`` (the validated model), an unknown key says which field was
    probably meant (:mod:`green_agent.engine.field_hints`) instead of pydantic's "Extra inputs are not permitted"."""
    lines = []
    for item in error.errors():
        where = (
            ".".join([prefix, *(str(p) for p in item["loc"])] if prefix else [str(p) for p in item["loc"]]) or "<root>"
        )
        message = (
            describe_problem(root, item, extra_names={})
            if root is not None
            else item["msg"].removeprefix("Value error, ")
        )
        lines.append(f"{where}: {message}")
    return "; ".join(lines)


def parse_battle_config(data: dict[str, Any]) -> BattleConfig:
    """Validate a request ``config`` (the pass_k_config fields, optionally nested under ``pass_k_config``)."""
    if "pass_k_config" in data:
        extra = {k: v for k, v in data.items() if k != "pass_k_config"}
        data = {
            **data["pass_k_config"],
            **({"user_simulator": extra["user_simulator"]} if "user_simulator" in extra else {}),
        }
    try:
        return BattleConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, root=BattleConfig)) from None


def parse_remote_battle_config(
    data: object, default: BattleConfig, *, max_concurrency: int | None = None
) -> BattleConfig:
    """Validate a battle config that came over the network, on top of the operator's ``default``.

    Remote configs may choose the battle (mode, tasks, k, time limits within their bounds, the user simulator's
    temperature and seed, the price table the report prices tokens with) but nothing that spends the operator's
    money or resources beyond what the operator chose, and not where the green agent connects or which of its
    environment variables it reads. Refused, each with an error naming the field:

    * any of :data:`OPERATOR_ONLY_USER_FIELDS` (endpoint, key variable, model);
    * a ``user_simulator.kind`` other than the operator's (an LLM user spends the operator's key);
    * a value above the operator's for :data:`OPERATOR_CAPPED_USER_FIELDS` (LLM calls per attempt and their
      duration) and :data:`OPERATOR_CAPPED_FIELDS` (what is held per attempt);
    * ``concurrency`` above ``max_concurrency`` (each attempt in flight holds a process of its own);
    * a ``certify`` comparison without ``baseline_values`` (``certify.baseline``, a path, is never opened here).

    The number of attempts (tasks x k) is bounded by the green agent (``--max-attempts``) once the tasks are known.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"config: expected a JSON object, got {type(data).__name__}")
    flat = dict(data)
    if "pass_k_config" in flat:
        inner = flat.pop("pass_k_config")
        if not isinstance(inner, dict):
            raise ConfigError("config.pass_k_config: expected a JSON object")
        user = flat.pop("user_simulator", None)
        if flat:  # nothing may be silently ignored: a field beside pass_k_config is a mistake
            raise ConfigError(f"config.{min(flat)}: not allowed beside pass_k_config (put it inside, or drop it)")
        flat = {**inner, **({"user_simulator": user} if user is not None else {})}
    user = flat.get("user_simulator")
    base = default.model_dump()
    for old, new in RENAMED_FIELDS.items():
        if old in flat:  # the remote value, under its old name, replaces the default
            base.pop(new)
    if user is not None:
        if not isinstance(user, dict):
            raise ConfigError("user_simulator: expected a JSON object")
        for name in OPERATOR_ONLY_USER_FIELDS:
            if name in user:
                raise ConfigError(
                    f"user_simulator.{name}: set by the green agent's operator (its flags, environment or scenario), "
                    "not by a remote request; remove the field"
                )
        if "kind" in user and user["kind"] != default.user_simulator.kind:
            raise ConfigError(
                f"user_simulator.kind: this green agent's operator runs the {default.user_simulator.kind!r} user "
                f"simulator; a remote request cannot switch it to {str(user['kind'])[:40]!r} (remove the field)"
            )
        for name in OPERATOR_CAPPED_USER_FIELDS:
            _refuse_above(f"user_simulator.{name}", user.get(name), getattr(default.user_simulator, name))
        flat["user_simulator"] = {**base["user_simulator"], **user}
    for name in OPERATOR_CAPPED_FIELDS:
        _refuse_above(name, flat.get(name), getattr(default, name))
    if (
        max_concurrency is not None
        and isinstance(flat.get("concurrency"), int)
        and flat["concurrency"] > max_concurrency
    ):
        raise ConfigError(
            f"concurrency: at most {max_concurrency} attempts in flight on this green agent (got {flat['concurrency']})"
        )
    config = parse_battle_config({**base, **flat})
    cert = config.certify
    if "certify" in flat and cert is not None and cert.compare is not None and cert.baseline_values is None:
        why = "a remote comparison carries them: the green agent never opens certify.baseline (a path, a label here)"
        raise ConfigError(f"certify.baseline_values: {why}")
    return config


def _refuse_above(field: str, value: object, limit: float) -> None:
    """A remote value above the operator's ``limit`` for a field that spends the operator's money or resources."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > limit:
        shown = str(value) if isinstance(value, float) or value.bit_length() <= 64 else "a larger number"
        most = int(limit) if float(limit).is_integer() else limit
        raise ConfigError(
            f"{field}: at most {most} on this green agent (its operator's setting); a remote request may lower it, "
            f"not raise it (got {shown})"
        )


def remote_config_dict(config: BattleConfig) -> dict[str, Any]:
    """``config`` as JSON for a request to a green agent, without the operator-only user-simulator fields (the
    green agent takes those from its own scenario, see :func:`parse_remote_battle_config`)."""
    data = config.model_dump(mode="json")
    for name in OPERATOR_ONLY_USER_FIELDS:
        data["user_simulator"].pop(name, None)
    return data


SCENARIO_TABLES = frozenset({"name", "pass_k_config", "user_simulator", "white_agent", "backend"})
"""The top-level keys of a scenario file (:class:`launcher.cli.scenario.Scenario` has the same fields)."""


def load_battle_config(path: str | Path) -> BattleConfig:
    """The battle part of a scenario TOML file: ``[pass_k_config]`` and ``[user_simulator]``.

    The green agent reads only these tables (``arena-green --scenario``); the other tables describe how the launcher
    starts agents and are validated by :func:`launcher.cli.scenario.load_scenario`. Raises :class:`ConfigError`
    naming the file and the field.
    """
    path = Path(path)
    data = read_toml(path)
    unknown = sorted(set(data) - SCENARIO_TABLES)
    if unknown:  # a misspelt [pass_k_config] must not run the defaults silently
        raise ConfigError(
            f"{path}: {unknown[0]}: not a scenario table (expected one of {', '.join(sorted(SCENARIO_TABLES))})"
        )
    battle = data.get("pass_k_config", {})
    user = data.get("user_simulator")
    if not isinstance(battle, dict):
        raise ConfigError(f"{path}: pass_k_config: expected a table")
    if user is not None and not isinstance(user, dict):
        raise ConfigError(f"{path}: user_simulator: expected a table")
    battle = {**battle, **({"user_simulator": user} if user is not None else {})}
    try:
        return BattleConfig.model_validate(battle)
    except ValidationError as error:
        raise ConfigError(
            f"{path}: {format_validation_error(error, prefix='pass_k_config', root=BattleConfig)}"
        ) from None


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file as a dict; :class:`ConfigError` naming the file when it is missing, unreadable, not UTF-8 or not
    TOML."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such scenario file") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror or error})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (line {line}, byte {error.start}: {raw[error.start : error.start + 1]!r}); "
            "TOML files are UTF-8: save the file as UTF-8"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None
