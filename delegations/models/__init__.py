from .tokens import APIToken
from .workers import WorkerHeartbeat

__all__ = ["APIToken", "WorkerHeartbeat"]
