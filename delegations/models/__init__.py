from .approvals import Approval
from .delegations import Delegation
from .events import RunEvent
from .runs import Run, RunCheckpoint, RunCheckpointPart, RunMessage
from .tokens import APIToken
from .workers import WorkerHeartbeat

__all__ = ["APIToken", "Approval", "Delegation", "Run", "RunCheckpoint", "RunCheckpointPart", "RunEvent", "RunMessage", "WorkerHeartbeat"]
