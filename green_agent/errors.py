"""The green agent's exceptions, in one tree: where each is defined and what it extends.

The classes stay beside the code that raises them (the engine must not import the service, the evaluations neither;
a shared module of classes would tie them together); this is the one place that shows them all, so an ``except``
clause can be chosen by looking here. tests/architecture/test_exception_trees.py checks the drawing against the code:
a class added, moved, renamed or rebased without redrawing fails it, and so does a name used twice.

Each line: the class, then its module under ``green_agent``; the roots are the outside bases.

Exception tree::

    Exception
        AnswerTooLarge (engine.tau.sandbox)
        BodyRejected (body_limits)
        _EmptyAnswer (engine.tau.users.llm)
        LateCall (engine.tau.sandbox_cpu)
        RunError (evaluations.fairforge_request)
        StoppedOnPurpose (engine.attribution)
        ToolFault (engine.tau.sandbox)
        UserSimulatorError (engine.tau.users.base)
        WhiteAgentError (engine.white_errors)
            WhiteAgentCommunicationError (engine.white_errors)
            WhiteAgentReplyTooLarge (engine.white_errors)
            WhiteAgentReportedFailure (engine.white_errors)
            WhiteAgentTimeout (engine.white_errors)
    httpx.TransportError
        ReplyTooLarge (engine.capped_transport)
    OSError
        RunFileRefused (run_files)
    RuntimeError
        AttemptLeaseError (service.attempt_lease_client)
            AttemptQueueMissing (service.attempt_lease_client)
            LeaseBackendDown (service.attempt_lease_client)
            LeaseLost (service.attempt_lease_client)
            LeaseRequestRefused (service.attempt_lease_client)
            OwnerStillAlive (service.attempt_lease_client)
            PoolRefused (service.attempt_lease_client)
        SandboxError (engine.tau.sandbox)
        ScoringError (engine.tau.scoring)
        Tau2NotInstalled (engine.tau.flavour)
        WorkerPoolError (engine.workers.pool)
    ValueError
        ActionParseError (engine.turn_protocol)
        _CellJsonError (evaluations.csv_suite)
        ConfigError (engine.config)
            AgentBeatsMessageError (wire.agentbeats)
            BattleIdError (engine.battle_ids)
            CapacityError (wire.agentbeats)
            RunFileError (engine.run_store)
            TaskSelectionError (engine.tau.tasks)
        ConnectorError (evaluations.connectors)
        CsvValidationError (evaluations.csv_suite)
        JsonRefused (evaluations.safe_json)
        LexicalUnsupported (evaluations.lexical)
        RegradeError (engine.tau.regrade)
        ScoreFileError (evaluations.score_file)
        TokenError (service.operator_auth)
        TrajectoryFileError (wire.trajectory)
        _Unreadable (engine.turn_protocol)
"""
