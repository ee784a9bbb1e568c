"""The runs home of ``arena view runs/``: the ``runs_home`` section of an ``arena.battle-import/1`` file.

Why a section of the import file: the home lists every run of a folder and opens the comparison of any two, with
the statistics of ``arena compare``. The backend imports nothing of the green agent, so it cannot compute those
statistics; the launcher computes them with ``arena compare``'s own code and hands them over here, next to the
battles it imports. The backend only checks and shows them.

Shape (every key below; documented in battle_backend/README.md, "Importing a run"):

- ``folder``: the folder as the user named it;
- ``runs``: one row per run shown (status, domains, tasks, k, pass^k with its interval, failure mix, cost, date,
  short fingerprint, the run's directory); each is also imported as a battle under ``battle_id``;
- ``skipped``: runs left out, with the reason (a link out of the folder, an unreadable summary, over the cap);
- ``comparisons``: pairs of runs by battle id; ``report`` is ``arena compare A B --json`` (``arena.compare/1``,
  read here through the small models below, unknown keys ignored) or ``refusal`` is what ``arena compare A B``
  says instead (e.g. the fingerprints differ); pairs not listed were not precomputed (the page says to run
  ``arena compare``);
- ``limits``: the caps the launcher applied (``max_runs``, ``max_pairs``) and what they left out.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

MAX_RUNS = 1000
MAX_COMPARISONS = 100_000
MAX_LIST = 2000
"""Lists inside one comparison (flipped and unmatched tasks, warnings, per-j rows) are at most this long."""

Text = Annotated[StrictStr, Field(max_length=4096)]
Name = Annotated[StrictStr, Field(min_length=1, max_length=256)]
BattleId = Annotated[StrictStr, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]
Number = StrictFloat | StrictInt
RunStatus = Literal["finished", "interrupted", "running", "cancelled", "error"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Tolerant(BaseModel):
    """Part of an ``arena.compare/1`` report: what the page shows; other keys are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class HomeRun(_Strict):
    """One run of the folder, as its row shows it."""

    battle_id: BattleId
    name: Name
    """The run's directory name (what ``sort by name`` orders)."""
    path: Text
    """The run's directory as the user can pass it to ``arena compare``."""
    import_file: Annotated[StrictStr, Field(max_length=255)] | None = None
    """The name of the import file (beside this one) that holds the run's battle: when the backend refuses that
    file, the run moves to ``skipped`` with the backend's reason instead of failing the whole import."""
    status: RunStatus
    domains: list[Name] = Field(default_factory=list, max_length=64)
    tasks: Annotated[StrictInt, Field(ge=0)]
    k: Annotated[StrictInt, Field(ge=0)]
    j: Annotated[StrictInt, Field(ge=1)] | None = None
    """The j of the score (the run's k, or the largest j its summary has)."""
    pass_hat: Number | None = None
    ci_low: Number | None = None
    ci_high: Number | None = None
    failure_mix: dict[Name, Annotated[StrictInt, Field(ge=0)]] = Field(default_factory=dict, max_length=64)
    infrastructure_errors: Annotated[StrictInt, Field(ge=0)] = 0
    attempts: Annotated[StrictInt, Field(ge=0)] = 0
    cost_usd: Number | None = None
    date: Annotated[StrictStr, Field(max_length=64)] = ""
    fingerprint: Annotated[StrictStr, Field(max_length=64)] | None = None
    """A short hash of what the run was scored on (tau2 build, domain files, user simulator); None when unknown."""
    fingerprint_text: Text = ""
    """The same in words (tau2 distribution and version, user simulator)."""
    calibration: StrictBool = False
    warnings: list[Text] = Field(default_factory=list, max_length=32)


class SkippedRun(_Strict):
    """An entry of the folder that is not shown, and why."""

    name: Text
    reason: Text


class CompareHeader(_Tolerant):
    battle_id: Text
    domains: list[Text] = Field(default_factory=list, max_length=64)
    k: StrictInt = 0
    status: Text = ""
    tasks: StrictInt = 0
    counted_trials: StrictInt = 0
    infrastructure_errors: StrictInt = 0


class CompareVerdict(_Tolerant):
    outcome: Text
    text: Text
    rule: Text = ""
    confidence: Number = 0.95
    diff: Number | None = None
    ci_low: Number | None = None
    ci_high: Number | None = None
    metric: Text = "pass^1"
    p_value: Number | None = None
    mde: Number | None = None
    mde_note: Text = ""
    tasks: StrictInt = 0


class ComparePerJ(_Tolerant):
    j: StrictInt
    tasks_paired: StrictInt
    pass_hat_a: Number | None = None
    pass_hat_b: Number | None = None
    pass_hat_diff: Number | None = None
    pass_hat_diff_ci_low: Number | None = None
    pass_hat_diff_ci_high: Number | None = None
    pass_hat_p_value: Number | None = None
    pass_hat_mde: Number | None = None
    a_better: StrictInt = 0
    b_better: StrictInt = 0
    ties: StrictInt = 0


class CompareStats(_Tolerant):
    confidence: Number = 0.95
    seed: StrictInt = 0
    tasks_in_both: StrictInt = 0
    per_j: list[ComparePerJ] = Field(default_factory=list, max_length=MAX_LIST)


class CompareFlip(_Tolerant):
    task_key: Text
    successes_a: StrictInt
    n_a: StrictInt
    successes_b: StrictInt
    n_b: StrictInt
    rate_diff: Number


class CompareFlips(_Tolerant):
    better_in_a: list[CompareFlip] = Field(default_factory=list, max_length=MAX_LIST)
    better_in_b: list[CompareFlip] = Field(default_factory=list, max_length=MAX_LIST)


class CompareUnmatched(_Tolerant):
    only_in_a: list[Text] = Field(default_factory=list, max_length=MAX_LIST)
    only_in_b: list[Text] = Field(default_factory=list, max_length=MAX_LIST)


class CompareCost(_Tolerant):
    label: Text
    a: Text
    b: Text


class CompareReport(_Tolerant):
    """``arena compare A B --json`` (``arena.compare/1``), as far as the compare view shows it."""

    schema_id: Literal["arena.compare/1"] = Field(alias="schema")
    a: CompareHeader
    b: CompareHeader
    comparison: CompareStats
    verdict: CompareVerdict
    flips: CompareFlips = CompareFlips()
    unmatched: CompareUnmatched = CompareUnmatched()
    warnings: list[Text] = Field(default_factory=list, max_length=MAX_LIST)
    cost: list[CompareCost] = Field(default_factory=list, max_length=64)


class Comparison(_Strict):
    """Run ``a`` (the candidate: the newer run) against run ``b`` (the baseline): the report or the refusal."""

    a: BattleId
    b: BattleId
    report: CompareReport | None = None
    refusal: Text | None = None

    @model_validator(mode="after")
    def _one_of(self) -> Comparison:
        if (self.report is None) == (self.refusal is None):
            raise ValueError("a comparison holds either a report or a refusal")
        return self


class HomeLimits(_Strict):
    max_runs: Annotated[StrictInt, Field(ge=0)]
    max_pairs: Annotated[StrictInt, Field(ge=0)]
    runs_over_cap: Annotated[StrictInt, Field(ge=0)] = 0
    pairs_not_computed: Annotated[StrictInt, Field(ge=0)] = 0


class RunsHome(_Strict):
    """The ``runs_home`` section (see the module docstring)."""

    folder: Text
    runs: list[HomeRun] = Field(default_factory=list, max_length=MAX_RUNS)
    skipped: list[SkippedRun] = Field(default_factory=list, max_length=MAX_RUNS)
    comparisons: list[Comparison] = Field(default_factory=list, max_length=MAX_COMPARISONS)
    limits: HomeLimits

    def without_refused(self, refused: dict[str, str]) -> RunsHome:
        """This home with the runs whose import file (by name) the backend refused moved to ``skipped``."""
        kept = [run for run in self.runs if run.import_file not in refused]
        moved = [
            SkippedRun(name=run.name, reason=f"the backend refused its battle: {refused[run.import_file]}"[:4096])
            for run in self.runs
            if run.import_file in refused
        ]
        return self.model_copy(update={"runs": kept, "skipped": [*self.skipped, *moved]})

    def run(self, battle_id: str) -> HomeRun | None:
        return next((run for run in self.runs if run.battle_id == battle_id), None)

    def comparison(self, first: str, second: str) -> Comparison | None:
        """The comparison of two runs, whichever order they are named in."""
        wanted = {first, second}
        return next((c for c in self.comparisons if {c.a, c.b} == wanted), None)
