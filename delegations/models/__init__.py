from .approvals import Approval
from .delegations import Delegation
from .events import RunEvent
from .runs import Run, RunMessage
from .tokens import APIToken
from .workers import WorkerHeartbeat

__all__ = ["APIToken", "Approval", "Delegation", "Run", "RunEvent", "RunMessage", "WorkerHeartbeat"]
