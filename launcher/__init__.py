"""Starting agents and battles: process supervision, AgentBeats launcher servers, and the ``arena`` command line.

Modules: :mod:`launcher.processes` (children in their own process groups, readiness waits, clean stops),
:mod:`launcher.ports` (free loopback ports), :mod:`launcher.launcher_server` (AgentBeats launcher per agent),
:mod:`launcher.assessment_client` (one streamed assessment against the green agent), :mod:`launcher.run_command`
(``arena run``) and :mod:`launcher.cli` (typer app).
"""
