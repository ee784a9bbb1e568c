"""Starting agents and battles: process supervision, AgentBeats launcher servers, and the ``arena`` command line.

Modules: :mod:`launcher.processes` (children in their own process groups, readiness waits, clean stops),
:mod:`launcher.ports` (free loopback ports), :mod:`launcher.agentbeats_launcher` (AgentBeats launcher per agent),
:mod:`launcher.cli.assessment_client` (one streamed assessment against the green agent), :mod:`launcher.cli.run_command`
(``arena run``) and :mod:`launcher.cli.app` (typer app).
"""
