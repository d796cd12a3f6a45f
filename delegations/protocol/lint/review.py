"""How closely a verifier reviews a task: the agloop delegation protocol's review-depth tree.

Step 1: a security keyword (the protocol's list, word-boundary match, plural and common
inflections) in the goal, task description or a task definition's title/description ->
full. Step 2: estimated_effort "large", high priority or on the critical path -> full.
Step 3: files_to_modify (or, for a verifier without them, the executor's files_modified)
all .md/.json/.yaml/.yml/.env/.config -> lightweight. Else standard.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from ..packet import HandoffPacket, TaskDefinition

# The decision tree's Step 1 keywords (verbatim), each with the inflections that still
# name the same thing ("tokens", "queries", "authorization").
SECURITY_KEYWORDS: tuple[str, ...] = (
    "auth", "login", "password", "token", "JWT", "crypto", "encryption",
    "SQL", "query", "injection", "validation", "sanitize", "CORS", "CSRF",
)
_KEYWORD_FORMS: dict[str, str] = {
    "auth": r"auth(?:[nz]|entic\w*|ori[sz]\w*)?",
    "login": r"log-?ins?",
    "password": r"passwords?",
    "token": r"tokens?",
    "JWT": r"jwts?",
    "crypto": r"crypto(?:graphy|graphic)?",
    "encryption": r"encrypt(?:ion|ed|s|ing)?",
    "SQL": r"sql",
    "query": r"quer(?:y|ies)",
    "injection": r"injections?",
    "validation": r"validations?",
    "sanitize": r"saniti[sz](?:e|es|ed|ing|ation)",
    "CORS": r"cors",
    "CSRF": r"csrf",
}
# Word boundaries that also split snake_case and paths ("auth_token", "src/auth.ts").
_SECURITY_RE = re.compile(
    r"(?<![A-Za-z0-9])(?:" + "|".join(
        f"(?P<k{index}>{_KEYWORD_FORMS[word]})" for index, word in enumerate(SECURITY_KEYWORDS))
    + r")(?![A-Za-z0-9])", re.IGNORECASE)
DOC_CONFIG_SUFFIXES: frozenset[str] = frozenset({".md", ".json", ".yaml", ".yml", ".env", ".config"})
_HIGH_PRIORITY = frozenset({"high", "critical", "urgent", "p0", "p1"})


def review_depth(packet: HandoffPacket) -> str:
    """"full" | "standard" | "lightweight" by the review-depth decision tree (see above)."""
    return review_depth_reason(packet)[0]


def review_depth_reason(packet: HandoffPacket) -> tuple[str, str]:
    """``(depth, why)`` by the review-depth decision tree; ``why`` is one readable sentence."""
    definitions = _task_definitions(packet)
    texts = [packet.goal or ""]
    if packet.task is not None and packet.task.description:
        texts.append(packet.task.description)
    for definition in definitions:
        texts.extend(text for text in (definition.title, definition.description) if text)
    for text in texts:
        match = _SECURITY_RE.search(text)
        if match is not None:
            keyword = SECURITY_KEYWORDS[int(str(match.lastgroup)[1:])]
            return "full", f"security-sensitive: keyword '{keyword}' in {match.group(0)!r}"
    for definition in definitions:
        if (definition.estimated_effort or "").strip().lower() == "large":
            return "full", "estimated_effort is 'large'"
        if (definition.priority or "").strip().lower() in _HIGH_PRIORITY:
            return "full", f"high priority ({definition.priority})"
        if definition.critical_path:
            return "full", "the task is on the critical path"
    files = [path for definition in definitions for path in definition.files_to_modify]
    if not files and packet.verifier_params is not None:
        result = packet.verifier_params.executor_result or {}
        modified = result.get("files_modified")
        if isinstance(modified, list):
            files = [str(path) for path in modified]
    if files and all(_is_doc_or_config(path) for path in files):
        return "lightweight", "files_to_modify holds only documentation/config files"
    return "standard", "a typical task (no security keyword, not large, not docs/config only)"


def _task_definitions(packet: HandoffPacket) -> list[TaskDefinition]:
    out: list[TaskDefinition] = []
    for params in (packet.executor_params, packet.verifier_params):
        if params is not None:
            out.extend(params.task_definitions)
    return out


def _is_doc_or_config(path: str) -> bool:
    name = PurePosixPath(path.replace("\\", "/")).name.lower()
    if name == ".env" or name.startswith(".env."):
        return True
    return PurePosixPath(name).suffix in DOC_CONFIG_SUFFIXES
