"""The approval inbox: what waits for a person's decision, and deciding it.

- ``decisions``: recording a decision once and resuming the parked run
- ``views``, ``forms``, ``api``: the inbox page, the decision forms, ``/api/approvals``

The runner asks through the approval gate of its execution (``delegations.runs.approval_gate``),
which opens the items listed here.
"""
