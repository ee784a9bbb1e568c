"""The launcher's exceptions, in one tree (an ``except`` clause can be chosen by looking here).

Classes that one command alone raises and catches stay beside it; the tree below is the whole of them, checked
against the code by tests/architecture/test_exception_trees.py (a class added, moved or rebased without redrawing
fails that test). Each line: the class, then its module under ``launcher``; the roots are the outside bases.

Exception tree::

    Exception
        NotYet (errors)
        _Stop (cli.backend_resume)
    RuntimeError
        AssessmentError (cli.assessment_client)
        BackendError (cli.backend_api)
        ProcessError (processes)
            ChildExitedError (processes)
            StartupTimeoutError (processes)
        RegistrationError (cli.register_command)
    ValueError
        CompareError (cli.compare_command)
        ExportError (errors)
        PlanError (cli.plan_command)
        RunDirError (cli.view_import)

Defined here are the ones shared between modules (so that no two modules import each other for them).
"""

from __future__ import annotations


class ExportError(ValueError):
    """The source cannot be exported; the message names the file and the problem (``arena export``, the tau2
    export and ``arena compare`` raise it)."""


class NotYet(Exception):
    """Something polled did not answer as hoped this time (unreachable, HTTP 429 or 5xx, not 200): try again. The
    message, when there is one, says what it did."""
