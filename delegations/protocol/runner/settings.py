"""Runner-wide limits and switches."""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..capabilities import APPROVAL_REQUIRED_CAPABILITIES

# One random key per process when the host configures none: tokens then only verify in
# the process that issued them, which is all an in-process runner needs.
_PROCESS_TOKEN_KEY = secrets.token_bytes(32)


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    """Runner-wide limits and switches (the Django side fills them from HANDOFF_* settings)."""

    token_key: bytes = _PROCESS_TOKEN_KEY
    max_depth: int = 3
    soft_threshold: float = 0.8
    approval_required: frozenset[str] = APPROVAL_REQUIRED_CAPABILITIES
    workspace_root: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "handoff-workspaces")
    subprocess_enabled: bool = False
    payload_limit_bytes: int | None = None      # None: lint's default
    default_timeout_s: float = 900.0
    http_max_bytes: int = 1_000_000
    http_timeout_s: float = 20.0
    read_max_bytes: int = 256_000
    command_timeout_s: float = 60.0
    retry_limit: int = 2
    # a result still invalid after the self-correction turn: False ends the run FAILED
    # (ERR_INVALID_RESULT); True asks a person (inbox kind invalid_result) first
    invalid_result_inbox: bool = False
    max_concurrency: int = 8                    # OpenClaw sub-agents' lane default
    prices: Mapping[str, Any] | None = None     # model -> (input, output) USD per 1M tokens
    text_flush_chars: int = 200
    text_flush_s: float = 0.05
    cancel_grace_s: float = 1.0

    @property
    def lint_limits(self) -> dict[str, int]:
        """The keyword arguments that give ``lint_packet`` this host's payload limit
        (none: lint's own default)."""
        return {} if self.payload_limit_bytes is None else {"payload_limit_bytes": self.payload_limit_bytes}
