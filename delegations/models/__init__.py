from .approval_rules import (
    ApprovalRule,
    ApprovalRuleVersion,
    ApprovalSignoff,
    RuleDecision,
    RuleEffect,
)
from .approvals import Approval
from .delegations import Delegation, DelegationVersion
from .events import RunEvent
from .imported import ImportedRun
from .mcp_servers import McpServer
from .push_configs import TaskPushConfig
from .remote_agents import RemoteAgent
from .runs import Run, RunCheckpoint, RunCheckpointPart, RunMessage
from .tokens import APIToken
from .workers import WorkerHeartbeat

__all__ = ["APIToken", "Approval", "ApprovalRule", "ApprovalRuleVersion", "ApprovalSignoff", "Delegation", "DelegationVersion", "ImportedRun", "McpServer", "RemoteAgent", "RuleDecision", "RuleEffect", "Run", "RunCheckpoint", "RunCheckpointPart", "RunEvent", "RunMessage", "TaskPushConfig", "WorkerHeartbeat"]
