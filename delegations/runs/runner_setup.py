"""What a run executes with, from the installation's settings: the runner's settings and
each adapter's defaults."""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.db import connection

from delegations.models import McpServer, RemoteAgent
from delegations.protocol.a2a_subagents import RemoteAgents
from delegations.protocol.adapters import config_error
from delegations.protocol.mcp_client import McpTools
from delegations.protocol.runner import RunnerSettings


def runner_settings() -> RunnerSettings:
    """RunnerSettings from the HANDOFF_* settings. The token key derives from SECRET_KEY so
    that every worker of an installation verifies the tokens another one issued."""
    key = hashlib.sha256(b"handoff-capability-tokens:" + settings.SECRET_KEY.encode()).digest()
    return RunnerSettings(
        token_key=key, max_depth=settings.HANDOFF_MAX_DEPTH,
        soft_threshold=settings.HANDOFF_SOFT_BUDGET_THRESHOLD,
        approval_required=frozenset(settings.HANDOFF_APPROVAL_REQUIRED_CAPABILITIES),
        workspace_root=settings.HANDOFF_WORKSPACE_ROOT,
        subprocess_enabled=settings.HANDOFF_SUBPROCESS_ENABLED,
        payload_limit_bytes=settings.HANDOFF_PAYLOAD_LIMIT_BYTES,
        invalid_result_inbox=settings.HANDOFF_INVALID_RESULT_POLICY == "ask")


def execution_tools() -> tuple[McpTools | None, RemoteAgents | None]:
    """The tools of the enabled MCP servers and the skills of the enabled remote A2A agents,
    for the runs of one execution; None for each kind none is enabled of, so a run without
    them lists nothing and never loads their SDKs. Most installations enable neither: one
    statement asks whether any is (about 25 µs) before the two queries that list them (607
    µs a run together, this machine, 2026-12-05; py-spy: 4.6 % of the server under the load
    probe)."""
    mcp, remote = _any_enabled()
    return (mcp_tools() if mcp else None), (remote_agents() if remote else None)


def _any_enabled() -> tuple[bool, bool]:
    quote = connection.ops.quote_name
    enabled = quote("enabled")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT EXISTS (SELECT 1 FROM {quote(McpServer._meta.db_table)} WHERE {enabled} = %s), "
            f"EXISTS (SELECT 1 FROM {quote(RemoteAgent._meta.db_table)} WHERE {enabled} = %s)", [True, True])
        mcp, remote = cursor.fetchone()
    return bool(mcp), bool(remote)


def mcp_tools() -> McpTools | None:
    """The tools of the enabled MCP servers (their results at most
    HANDOFF_PAYLOAD_LIMIT_BYTES); None when no server is configured."""
    servers = McpServer.objects.run_configs()
    if not servers:
        return None
    return McpTools(servers, result_max_bytes=settings.HANDOFF_PAYLOAD_LIMIT_BYTES)


def remote_agents() -> RemoteAgents | None:
    """The skills of the enabled remote A2A agents; None when no agent is configured."""
    agents = RemoteAgent.objects.run_configs()
    if not agents:
        return None
    return RemoteAgents(agents)


def adapter_config(name: str, config: dict[str, Any] | None) -> dict[str, Any]:
    """The run's adapter config with the installation's defaults filled in. Hosts and keys
    never travel in configs: the hosted adapters take them, and their default model, from
    the operator's endpoints (settings.HANDOFF_MODEL_ENDPOINTS)."""
    merged = dict(config or {})
    if name == "local" and merged.get("model_path", settings.HANDOFF_LOCAL_MODEL_PATH) != (
            settings.HANDOFF_LOCAL_MODEL_PATH):
        # a file on the server for llama.cpp to parse is the operator's to name, as a host
        # is (a stored config holds the operator's file, filled in when the run was made)
        raise config_error("local", "model_path", "is set by the operator "
                           "(HANDOFF_LOCAL_MODEL_PATH), not by a run; pick a shipped model with "
                           "'model' instead")
    if name == "local" and "model" not in merged:
        # A run that names its model keeps it; otherwise the installation's choice.
        if settings.HANDOFF_LOCAL_MODEL_PATH:
            merged["model_path"] = settings.HANDOFF_LOCAL_MODEL_PATH
        elif settings.HANDOFF_LOCAL_MODEL:
            merged["model"] = settings.HANDOFF_LOCAL_MODEL
    return merged
