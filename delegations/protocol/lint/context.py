"""One lint of one packet: what every check reads, and where it puts what it finds."""

from __future__ import annotations

from typing import Any

from ..packet import BASE_PARAM_FIELDS, ROLE_PARAMS_FIELDS, HandoffPacket
from .findings import CHECKS, Finding

_ROLE_PARAM_NAMES: tuple[str, ...] = tuple(ROLE_PARAMS_FIELDS.values())
_AGLOOP_BASE_FIELDS: tuple[str, ...] = BASE_PARAM_FIELDS[1:]


class LintContext:
    """The packet (and its parent, if given), read once, and the findings so far.

    A packet is an agloop delegation when it carries a ``<role>_params`` block or any
    agloop base parameter other than ``task_id``.
    """

    def __init__(self, packet: HandoffPacket, parent: HandoffPacket | None,
                 input_schema: dict[str, Any] | None = None) -> None:
        self.packet = packet
        self.parent = parent
        self.input_schema = input_schema   # the skill's, when a skill gives one
        self.findings: list[Finding] = []
        self.role = str(packet.subagent_type) if packet.subagent_type is not None else None
        # the packet's field values, read directly: lint_packet runs on every delegation
        fields = packet.__dict__
        self.present = [name for name in _ROLE_PARAM_NAMES if fields[name] is not None]
        self.agloop = bool(self.present)
        if not self.agloop:
            for name in _AGLOOP_BASE_FIELDS:
                if fields[name] is not None:
                    self.agloop = True
                    break

    def add(self, code: str, field: str, message: str) -> None:
        self.findings.append(Finding(code, CHECKS[code][0], field, message))


def is_blank(value: object) -> bool:
    """None, or text that is only whitespace."""
    return value is None or (isinstance(value, str) and not value.strip())
