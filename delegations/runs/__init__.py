"""Runs: one execution of a hand-off packet, from the request that starts it to its result.

- ``workflows``: create, retry, cancel, send a message (what pages, the API and commands call)
- ``queue``: handing runs to workers (``django.tasks``) and the owner's lane
- ``execution``: a worker executing a run tree under its lease (the runner, the watcher)
- ``sink``, ``checkpoints``, ``approval_gate``, ``database_thread``: what the runner reports
  through and asks through, backed by the database
- ``eventlog``: the gapless per-run event log and the run rows it keeps in step
- ``record``: events written outside a worker (a run ended by a cancel or the sweeper)
- ``maintenance``: the sweeper for runs whose worker died, and the archiver
- ``worker``: the background worker thread or process, with its heartbeat
- ``rollups``: what each run of a tree used, itself and with its subtree, from the event log
- ``export``: a run's whole record as one file, and reading such a file back
- ``api``: the runs' REST routes over the workflows

Its pages are beside it, in ``delegations.run_pages``; nothing here imports them.
"""
