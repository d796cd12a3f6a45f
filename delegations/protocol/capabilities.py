"""Capabilities: what a run may do, which of it needs a human, and signed scope tokens.

The hand-off protocol names the capabilities a skill declares (``fs_read``,
``ast_parsing``, ``subprocess_exec``) and the ones that need explicit approval
(``network_outbound``, ``file_delete``, ``financial_tx``). Delegation contracts ask for a
narrower, shorter-lived capability token on every delegation: capabilities shrink down the
chain and a child cannot widen its own scope. Tokens here are compact and stdlib-only::

    base64url(JSON claims) "." base64url(HMAC-SHA256(key, first part))

The signature covers the encoded claims text exactly, and verification compares the
encoded signature text, so changing any character of a token makes it fail.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import json_text, text_limits
from .errors import ErrorCode, ProtocolError

APPROVAL_REQUIRED_CAPABILITIES: frozenset[str] = frozenset(
    {"network_outbound", "file_delete", "financial_tx"})


@dataclass(frozen=True, slots=True)
class CapabilityInfo:
    name: str
    description: str   # one line a person reads before granting it
    tools: tuple[str, ...]  # runner tools this capability offers the model


_CATALOG: tuple[CapabilityInfo, ...] = (
    CapabilityInfo("fs_read", "Read files and list folders in the run's workspace.",
                   ("read_file", "list_files")),
    CapabilityInfo("fs_write",
                   "Edit files in the workspace via unified diffs or Targeted Replace Blocks.",
                   ("apply_edit",)),
    CapabilityInfo("file_delete", "Delete files in the workspace.", ("delete_file",)),
    CapabilityInfo("network_outbound", "Make outbound HTTP GET requests to the internet.",
                   ("http_get",)),
    CapabilityInfo("subprocess_exec",
                   "Run shell commands in the workspace (off unless the server enables it).",
                   ("run_command",)),
    CapabilityInfo("financial_tx", "Move money or make purchases through a payment tool.", ()),
    CapabilityInfo("ast_parsing", "Parse source code into syntax trees (compute only).", ()),
    CapabilityInfo("search", "Search documents or the web through a search tool.", ()),
    CapabilityInfo("compute", "Pure computation with no side effects outside the run.", ()),
)

CAPABILITY_INFO: dict[str, CapabilityInfo] = {info.name: info for info in _CATALOG}
KNOWN_CAPABILITIES: frozenset[str] = frozenset(CAPABILITY_INFO)
CAPABILITY_DESCRIPTIONS: dict[str, str] = {info.name: info.description for info in _CATALOG}
CAPABILITY_TOOLS: dict[str, tuple[str, ...]] = {info.name: info.tools for info in _CATALOG}
# Which capability a tool call needs, for checking each call against the run's token.
TOOL_CAPABILITY: dict[str, str] = {
    tool: info.name for info in _CATALOG for tool in info.tools}


def requires_approval(capability: str,
                      approval_required: Iterable[str] = APPROVAL_REQUIRED_CAPABILITIES) -> bool:
    """Whether each use of ``capability`` must wait for a human (the hand-off protocol's
    Approval Rules)."""
    return capability in approval_required


def approval_required_in(capabilities: Iterable[str],
                         approval_required: Iterable[str] = APPROVAL_REQUIRED_CAPABILITIES
                         ) -> list[str]:
    """The capabilities in ``capabilities`` that need explicit approval, in order, once each."""
    required = frozenset(approval_required)
    return _unique(cap for cap in capabilities if cap in required)


def unknown_capabilities(capabilities: Iterable[str]) -> list[str]:
    return _unique(cap for cap in capabilities if cap not in KNOWN_CAPABILITIES)


def tools_for(capabilities: Iterable[str]) -> list[str]:
    """Runner tools granted by ``capabilities`` (unknown capabilities grant none)."""
    return _unique(tool for cap in capabilities for tool in CAPABILITY_TOOLS.get(cap, ()))


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def narrow_capabilities(requested: Iterable[str], available: Iterable[str]) -> list[str]:
    """The requested capabilities the parent actually has (requested order, no repeats)."""
    allowed = frozenset(available)
    return _unique(cap for cap in requested if cap in allowed)


def capabilities_beyond(requested: Iterable[str], available: Iterable[str]) -> list[str]:
    """The requested capabilities outside the parent's scope (requested order, no repeats)."""
    allowed = frozenset(available)
    return _unique(cap for cap in requested if cap not in allowed)


# -- tokens -----------------------------------------------------------------------------

TOKEN_VERSION = 1
_MAX_TOKEN_LENGTH = 16_384  # far above any real token; bounds the work done on garbage input


@dataclass(frozen=True, slots=True)
class TokenClaims:
    run_id: str
    capabilities: tuple[str, ...]  # sorted, unique
    expires_at: float              # unix timestamp (seconds)
    parent_run_id: str | None = None

    def allows(self, capability: str) -> bool:
        return capability in self.capabilities

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "capabilities": list(self.capabilities),
                "expires_at": self.expires_at, "parent_run_id": self.parent_run_id}


def _refuse(message: str, **details: Any) -> ProtocolError:
    return ProtocolError(ErrorCode.CONSTRAINT_VIOLATION, message, details=details)


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _b64encode(raw: bytes) -> str:
    # what base64.urlsafe_b64encode does, without its two Python-level calls
    return binascii.b2a_base64(raw, newline=False).translate(_URLSAFE).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_BLOCK = 64   # SHA-256 block size
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))
_PADDED: dict[bytes, tuple[Any, Any]] = {}


def _padded(key: bytes) -> tuple[Any, Any]:
    """SHA-256 states with the inner and outer padded key already absorbed (RFC 2104).

    Computed once per key: every token issued or checked then costs two hash copies and
    two short updates instead of setting up a new HMAC (which OpenSSL 3 makes costly).
    """
    key = bytes(key)
    found = _PADDED.get(key)
    if found is None:
        block = hashlib.sha256(key).digest() if len(key) > _BLOCK else key
        block = block.ljust(_BLOCK, b"\0")
        found = (hashlib.sha256(block.translate(_IPAD)), hashlib.sha256(block.translate(_OPAD)))
        if len(_PADDED) >= 16:   # a handful of keys per process; never grows without bound
            _PADDED.clear()
        _PADDED[key] = found
    return found


def _signature(key: bytes, signed_part: str) -> str:
    """base64url(HMAC-SHA256(key, signed_part)): the same bytes as ``hmac.digest``."""
    inner_start, outer_start = _padded(key)
    inner = inner_start.copy()
    inner.update(signed_part.encode("ascii"))
    outer = outer_start.copy()
    outer.update(inner.digest())
    return _b64encode(outer.digest())


def _check_key(key: bytes) -> None:
    if not isinstance(key, bytes | bytearray) or not key:
        raise _refuse("The capability token key is empty or not bytes; configure a secret "
                      "token key (RunnerSettings.token_key) before issuing or checking tokens.")


def issue_token(key: bytes, *, run_id: str, capabilities: Iterable[str], expires_at: float,
                parent_run_id: str | None = None) -> str:
    """Sign a token granting ``capabilities`` to ``run_id`` until ``expires_at`` (unix time)."""
    _check_key(key)
    if not run_id:
        raise _refuse("A capability token needs a run_id.")
    if math.isnan(expires_at):
        # NaN compares false with every time, so such a token would never expire.
        raise _refuse("A capability token needs a real expiry time (unix seconds), not NaN; "
                      "use math.inf for a token that never expires.")
    claims: dict[str, Any] = {
        "v": TOKEN_VERSION,
        "run": run_id,
        "caps": sorted(set(capabilities)),
        "exp": float(expires_at),
    }
    if parent_run_id is not None:
        claims["parent"] = parent_run_id
    # exp may be math.inf (a token that never expires), written as Infinity
    claims_json = json_text.canonical(claims, allow_nan=True)
    payload = _b64encode(claims_json.encode("ascii"))
    return f"{payload}.{_signature(key, payload)}"


def _split(token: str) -> tuple[str, str]:
    if not isinstance(token, str) or not token:
        raise _refuse("The capability token is missing or not a string.")
    if len(token) > _MAX_TOKEN_LENGTH or not token.isascii():
        raise _refuse("The capability token is malformed (too long or not ASCII).")
    payload, dot, signature = token.partition(".")
    if not dot or not payload or not signature or "." in signature:
        raise _refuse("The capability token is malformed: expected two base64url parts "
                      "separated by one '.'.")
    return payload, signature


def _claims_from(payload: str) -> TokenClaims:
    try:
        data = text_limits.parse(_b64decode(payload), infinity=True)   # exp: Infinity, never expires
    except (binascii.Error, ValueError) as exc:
        raise _refuse("The capability token is malformed: its claims are not base64url JSON.") \
            from exc
    ok = (
        isinstance(data, dict)
        and data.get("v") == TOKEN_VERSION
        and isinstance(data.get("run"), str)
        and isinstance(data.get("caps"), list)
        and all(isinstance(cap, str) for cap in data["caps"])
        and isinstance(data.get("exp"), int | float) and not isinstance(data.get("exp"), bool)
        and isinstance(data.get("parent"), str | None)
    )
    if not ok:
        raise _refuse("The capability token is malformed: its claims lack run, caps, exp or v.")
    return TokenClaims(run_id=data["run"], capabilities=tuple(data["caps"]),
                       expires_at=float(data["exp"]), parent_run_id=data.get("parent"))


def verify_token(key: bytes, token: str, *, capability: str | None = None,
                 now: float | None = None) -> TokenClaims:
    """Check a token's signature, expiry and (optionally) that it grants ``capability``.

    Raises ``ProtocolError(ERR_CONSTRAINT_VIOLATION)`` saying which check failed.
    """
    _check_key(key)
    payload, signature = _split(token)
    # Compare the encoded text, not decoded bytes: base64 has spare bits in its last
    # character, and a token that differs anywhere must be refused.
    if not hmac.compare_digest(_signature(key, payload).encode("ascii"),
                               signature.encode("ascii")):
        raise _refuse("The capability token's signature does not match: it was altered or "
                      "signed with another key. Ask the scheduler for a new token.")
    claims = _claims_from(payload)
    current = time.time() if now is None else now
    if current >= claims.expires_at:
        raise _refuse(
            f"The capability token for run {claims.run_id} expired "
            f"{current - claims.expires_at:.0f} s ago; the run's time is up.",
            run_id=claims.run_id, expires_at=claims.expires_at)
    if capability is not None and capability not in claims.capabilities:
        granted = ", ".join(claims.capabilities) or "none"
        raise _refuse(
            f"Capability '{capability}' is outside run {claims.run_id}'s scope (granted: "
            f"{granted}). Ask for it with request_capability instead.",
            run_id=claims.run_id, capability=capability)
    return claims


def issue_child_token(key: bytes, parent_token: str, *, run_id: str,
                      capabilities: Iterable[str], expires_at: float,
                      now: float | None = None, strict: bool = False) -> str:
    """Issue a child's token that never exceeds its parent's: fewer or equal capabilities,
    expiring no later than the parent's token.

    The parent token is verified first. Capabilities beyond the parent's scope are dropped,
    or, with ``strict=True``, refused with an error naming them.
    """
    parent = verify_token(key, parent_token, now=now)
    requested = list(capabilities)
    beyond = capabilities_beyond(requested, parent.capabilities)
    if beyond and strict:
        raise _refuse(
            f"The child asks for {', '.join(beyond)}, which its parent run {parent.run_id} "
            f"does not have; capabilities can only shrink down the delegation chain.",
            capabilities=beyond, parent_run_id=parent.run_id)
    return issue_token(
        key,
        run_id=run_id,
        capabilities=narrow_capabilities(requested, parent.capabilities),
        expires_at=min(float(expires_at), parent.expires_at),
        parent_run_id=parent.run_id,
    )
