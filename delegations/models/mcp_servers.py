from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import (
    MaxValueValidator,
    MinValueValidator,
    RegexValidator,
    URLValidator,
)
from django.db import models

from delegations.protocol.capabilities import KNOWN_CAPABILITIES
from delegations.protocol.mcp_client import SECRET_ENV_PREFIX, McpServerConfig, mcp_tool_name

from .peer_urls import credentials_problem

DEFAULT_TOOL_CAPABILITY = "network_outbound"
TOOL_NAME_MAX = 64      # what the model providers accept for a tool's name
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class McpServerQuerySet(models.QuerySet["McpServer"]):
    def run_configs(self) -> list[McpServerConfig]:
        """The enabled servers as the runner takes them; one whose stdio command the
        operator no longer allowlists is left out."""
        return [config for server in self.filter(enabled=True).order_by("name")
                if (config := server.to_config()) is not None]


class McpServer(models.Model):
    """An MCP server whose tools runs may use, within their capabilities."""

    name = models.CharField(
        max_length=30, unique=True,
        validators=[RegexValidator(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$",
                                   "Use lowercase letters, digits and single hyphens.")],
        help_text="Short name; a run's model calls its tools mcp__<name>__<tool>.")
    url = models.URLField(max_length=500, blank=True, validators=[URLValidator(schemes=["http", "https"])],
                          help_text="The server's streamable-HTTP endpoint, e.g. https://tools.example.com/mcp.")
    stdio_command = models.CharField(
        max_length=100, blank=True,
        help_text="Instead of a URL: the name of a command the operator allowlisted in "
                  "HANDOFF_MCP_STDIO_COMMANDS.")
    secret_env = models.CharField(
        "secret variable", max_length=100, blank=True,
        validators=[RegexValidator(rf"^{SECRET_ENV_PREFIX}[A-Z0-9_]+$",
                                   f"Name a variable that starts with {SECRET_ENV_PREFIX}.")],
        help_text=f"The NAME of the environment variable holding the server's secret "
                  f"(sent as a Bearer token); it must start with {SECRET_ENV_PREFIX}. "
                  f"The secret itself is never stored.")
    allowed_tools = models.JSONField(
        default=list, help_text='The tools runs may be offered, e.g. ["search_issues", "get_issue"].')
    tool_capabilities = models.JSONField(
        default=dict, blank=True,
        help_text=f"The capability a run needs for a tool, where it is not "
                  f"{DEFAULT_TOOL_CAPABILITY}, e.g. {{\"search_issues\": \"search\"}}.")
    timeout_s = models.FloatField(default=30.0, validators=[MinValueValidator(1.0), MaxValueValidator(600.0)],
                                  help_text="How long one call may take before it fails.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = McpServerQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if bool(self.url) == bool(self.stdio_command):
            errors.setdefault("url", []).append("Give either a URL or a stdio command, not both.")
        if problem := credentials_problem(self.url, SECRET_ENV_PREFIX):
            errors.setdefault("url", []).append(problem)
        if self.stdio_command and self.stdio_command not in settings.HANDOFF_MCP_STDIO_COMMANDS:
            allowed = ", ".join(sorted(settings.HANDOFF_MCP_STDIO_COMMANDS)) or "none"
            errors.setdefault("stdio_command", []).append(
                f"'{self.stdio_command}' is not in HANDOFF_MCP_STDIO_COMMANDS (allowlisted: {allowed}).")
        errors.update(self._tool_errors())
        if errors:
            raise ValidationError(errors)

    def _tool_errors(self) -> dict[str, list[str]]:
        tools, capabilities = self.allowed_tools, self.tool_capabilities
        if not isinstance(tools, list) or not tools or not all(isinstance(t, str) for t in tools):
            return {"allowed_tools": ["List at least one tool name."]}
        errors: dict[str, list[str]] = {}
        for tool in tools:
            if not _TOOL_NAME.match(tool) or len(mcp_tool_name(self.name, tool)) > TOOL_NAME_MAX:
                errors.setdefault("allowed_tools", []).append(
                    f"'{tool}': use letters, digits, '_' and '-', with mcp__{self.name}__{tool} at "
                    f"most {TOOL_NAME_MAX} characters.")
        if not isinstance(capabilities, dict):
            return {**errors, "tool_capabilities": ["Map tool names to capabilities."]}
        for tool, capability in capabilities.items():
            if tool not in tools:
                errors.setdefault("tool_capabilities", []).append(f"'{tool}' is not in allowed_tools.")
            elif capability not in KNOWN_CAPABILITIES:
                errors.setdefault("tool_capabilities", []).append(
                    f"'{tool}': unknown capability {capability!r}; known: {', '.join(sorted(KNOWN_CAPABILITIES))}.")
        return errors

    def capability_of(self, tool: str) -> str:
        return str(self.tool_capabilities.get(tool, DEFAULT_TOOL_CAPABILITY))

    def to_config(self) -> McpServerConfig | None:
        """The server as the runner takes it; None when its stdio command is no longer
        allowlisted (the operator's list decides what runs on this machine)."""
        command: tuple[str, ...] = ()
        if self.stdio_command:
            argv: Any = settings.HANDOFF_MCP_STDIO_COMMANDS.get(self.stdio_command)
            if not argv:
                return None
            command = tuple(argv)
        return McpServerConfig(
            name=self.name, url=self.url, command=command, secret_env=self.secret_env,
            tools=tuple((tool, self.capability_of(tool)) for tool in self.allowed_tools),
            timeout_s=self.timeout_s)
