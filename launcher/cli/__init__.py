"""The ``arena`` command line and the scenario files it reads (:mod:`.scenario`)."""

from launcher.cli.app import app, main

__all__ = ["app", "main"]
