"""``arena run --certify CLAIM [--certify-baseline RUN_DIR]``: the claim as the scenario's ``[pass_k_config]
certify``, and its verdict (the exit code and one line) from summary.json.

Why apart from run_command.py: the certify flags' parsing and wording are their own concern; run_command.py keeps
the orchestration.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from green_agent.engine.config import BattleConfig, CertifyConfig, ConfigError, format_validation_error
from green_agent.engine.run_store import baseline_values
from launcher.cli.run_verdict import EXIT_GATE_FAILED, EXIT_OK
from launcher.cli.scenario import Scenario

EXIT_INCONCLUSIVE = 6
"""A ``certify`` battle spent its budget without deciding its claim."""


def with_certify(scenario: Scenario, claim: str, baseline: Path | None = None) -> Scenario:
    """The scenario with ``--certify`` (and ``--certify-baseline``, made absolute) as its ``[pass_k_config]
    certify`` (ConfigError naming the flag)."""
    certify: dict[str, Any] | str = claim
    try:
        if baseline is not None:
            parsed = CertifyConfig.model_validate(claim)
            if parsed.compare is None:
                raise ConfigError("--certify-baseline: only with a comparison claim (e.g. 'pass^1>=baseline-0.05')")
            values = baseline_values(baseline, parsed.j)  # RunFileError (a ConfigError) names certify.baseline
            certify = {
                **parsed.model_dump(exclude_none=True),
                "baseline": str(baseline.resolve()),
                "baseline_values": values,
            }
        config = BattleConfig.model_validate({**scenario.pass_k_config.model_dump(), "certify": certify})
    except ValidationError as error:
        raise ConfigError(f"--certify: {format_validation_error(error)}") from None
    if config.certify is not None and config.certify.compare is not None and config.certify.baseline is None:
        raise ConfigError("--certify-baseline: a comparison claim needs the baseline's run directory")
    return scenario.model_copy(update={"pass_k_config": config})


def certify_exit_code(summary: Mapping[str, Any]) -> int | None:
    """0 certified, 1 refuted, 6 inconclusive for a battle with ``certify``; None without."""
    cert = summary.get("certification")
    if not isinstance(cert, Mapping):
        return None
    return {"certified": EXIT_OK, "refuted": EXIT_GATE_FAILED, "inconclusive": EXIT_INCONCLUSIVE}.get(
        str(cert.get("decision"))
    )


def certify_line(summary: Mapping[str, Any]) -> str | None:
    """The certification verdict in one line (None without ``certify``)."""
    cert = summary.get("certification")
    if not isinstance(cert, Mapping):
        return None

    def num(v: object) -> str:
        return f"{v:.3f}" if isinstance(v, (int, float)) else "n/a"

    return (
        f"certify {cert.get('claim')}: {str(cert.get('decision')).upper()} after {cert.get('attempts_used')} of "
        f"{cert.get('attempts_fixed_design')} attempts ({cert.get('tasks_observed')} tasks in sequence); "
        f"{num(cert.get('confidence'))} confidence sequence [{num(cert.get('sequence_low'))}, "
        f"{num(cert.get('sequence_high'))}], estimate {num(cert.get('estimate'))} (exit {certify_exit_code(summary)})"
    )
