"""Run ids and session keys: how a run is named, and named as an OpenClaw sub-agent session.

OpenClaw sub-agents' key format is ``agent:<agentId>:subagent:<uuid>``: the agent a run
works for, then the run's own id. Every run of a tree, the root included, is named this way.
"""

from __future__ import annotations

import uuid

DEFAULT_AGENT_ID = "main"


def new_run_id() -> str:
    """A random (version 4) UUID as 32 hex digits."""
    return uuid.uuid4().hex


def session_key(agent_id: str | None, run_id: str) -> str:
    """``agent:<agentId>:subagent:<run id>``; an empty or missing agent id is ``main``."""
    return f"agent:{agent_id or DEFAULT_AGENT_ID}:subagent:{run_id}"
