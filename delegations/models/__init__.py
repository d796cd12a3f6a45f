from .approvals import Approval
from .delegations import Delegation, DelegationVersion
from .events import RunEvent
from .imported import ImportedRun
from .mcp_servers import McpServer
from .runs import Run, RunCheckpoint, RunCheckpointPart, RunMessage
from .tokens import APIToken
from .workers import WorkerHeartbeat

__all__ = ["APIToken", "Approval", "Delegation", "DelegationVersion", "ImportedRun", "McpServer", "Run", "RunCheckpoint", "RunCheckpointPart", "RunEvent", "RunMessage", "WorkerHeartbeat"]
