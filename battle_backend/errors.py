"""The battle backend's exceptions, in one tree: where each is defined and what it extends.

The classes stay beside the code that raises them (the store's in :mod:`battle_backend.store.protocol`, which both
stores raise; the API's and the battles' in the battles package); this is the one place that shows them all, so an
``except`` clause can be chosen by looking here. tests/architecture/test_exception_trees.py checks the drawing
against the code: a class added, moved, renamed or rebased without redrawing fails it, and so does a name used twice.

Each line: the class, then its module under ``battle_backend``; the roots are the outside bases.

Exception tree::

    Exception
        A2ADeliveryError (battles.a2a_messages)
        AgentCardError (battles.agent_cards)
        ApiError (battles.api_models)
            BodyTooLarge (battles.json_limits)
        _CardTooLarge (battles.agent_cards)
        ImportFileError (battles.imports)
        LauncherError (battles.launcher_client)
        StoreError (store.protocol)
            BattleClosed (store.protocol)
            BattleExists (store.protocol)
            BattleNotFound (store.protocol)
            DuplicateEvent (store.protocol)
            LeaseRefused (store.attempt_errors)
            OwnerAlive (store.attempt_errors)
            PoolKeyRejected (store.attempt_errors)
            PublishRefused (store.attempt_errors)
            QueueNotFound (store.attempt_errors)
            StoreUnavailable (store.protocol)
            TokenRejected (store.protocol)
            WriteFailed (store.protocol)
    RuntimeError
        SchemaTooNew (store.protocol)
        WriterClosed (store.sqlite.writer)
"""
