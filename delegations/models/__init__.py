from .approvals import Approval
from .delegations import Delegation, DelegationVersion
from .events import RunEvent
from .imported import ImportedRun
from .runs import Run, RunCheckpoint, RunCheckpointPart, RunMessage
from .tokens import APIToken
from .workers import WorkerHeartbeat

__all__ = ["APIToken", "Approval", "Delegation", "DelegationVersion", "ImportedRun", "Run", "RunCheckpoint", "RunCheckpointPart", "RunEvent", "RunMessage", "WorkerHeartbeat"]
