"""The protocols' own examples, as Python values, shared by the protocol tests.

The prefix says which protocol a constant reproduces: ``HANDOFF_`` the hand-off protocol
(``delegate_task`` / ``yield_control``, skill manifests, anti-patterns), ``AGLOOP_`` the
agloop delegation protocol, ``HANDOFF_PACKAGE`` the HandoffPackage format,
``CONTRACT_`` / ``DELEGATION_CONTRACT`` / ``RESULT_ENVELOPE`` delegation contracts, and
``OPENCLAW_`` OpenClaw sub-agents; its comment says which example. Where a protocol
shows a template with a placeholder (the agloop ``"{verbatim user request}"``), the
placeholder is filled with :data:`FEATURE_NAME` and the rest is kept as written; the raw
templates are kept too where a test needs the placeholder itself. Values a protocol only
describes in prose (the HandoffPackage, a delegation contract, OpenClaw's spawn
parameters and announce) are built from exactly the fields and words it uses.

Others may append their own sections at the end.
"""

from __future__ import annotations

import copy
import json
from typing import Any

# =========================================================================================
# the hand-off protocol — delegate_task / yield_control, skill manifests, anti-patterns
# =========================================================================================

# The two tool definitions as the protocol prints them (text, so a test can compare exactly).
HANDOFF_DELEGATE_TASK_TEXT = """
{
  "name": "delegate_task",
  "description": "Spawns a specialized subagent to execute a scoped objective.",
  "parameters": {
    "type": "object",
    "properties": {
      "subagent_type": { "type": "string", "enum": ["coder", "researcher", "reviewer", "executor"] },
      "instruction_set": { "type": "string", "description": "System-level prompt for subagent." },
      "input_data": { "type": "object" },
      "max_iterations": { "type": "integer", "default": 5 },
      "termination_trigger": { "type": "string", "description": "String or condition to signal completion." }
    },
    "required": ["subagent_type", "instruction_set", "input_data"]
  }
}
"""

HANDOFF_YIELD_CONTROL_TEXT = """
{
  "name": "yield_control",
  "description": "Terminates subagent session and returns data to parent agent.",
  "parameters": {
    "status": { "type": "string", "enum": ["SUCCESS", "FAILURE", "PARTIAL_COMPLETION"] },
    "output_payload": { "type": "object" },
    "log_summary": { "type": "string" },
    "error_report": { "type": "object", "nullable": true }
  },
  "required": ["status", "output_payload"]
}
"""

HANDOFF_MANIFEST: dict[str, Any] = {
    "skill_name": "SourceCodeAalyzer",
    "version": "1.2.0",
    "entry_point": "analyze.py",
    "input_schema": {"repo_path": "string", "strict_mode": "boolean"},
    "output_schema": {"vulnerabilities": "array", "sloc": "number"},
    "capabilities": ["fs_read", "ast_parsing", "subprocess_exec"],
}

HANDOFF_TARGETED_REPLACE_BLOCK = """FILE: /workspace/src/auth.py
REPLACE_START
def login(user):
    pass
REPLACE_WITH
def login(user):
    return authenticate(user)
REPLACE_END
"""

# Example 1: Successful Delegation (Research) — Parent Request, verbatim.
HANDOFF_PARENT_REQUEST: dict[str, Any] = {
    "task_id": "99ea-42",
    "subagent_type": "researcher",
    "payload": {
        "query": "Current price of TSLA",
        "sources": ["yahoo_finance", "bloomberg"],
    },
    "success_criteria": ["Return a float value", "Specify currency"],
}

# The same request as delegate_task arguments (the tool's own field names).
HANDOFF_DELEGATE_TASK_ARGS: dict[str, Any] = {
    "subagent_type": "researcher",
    "instruction_set": "You are a market data researcher. Look up the current price and "
                       "return it with its currency.",
    "input_data": {
        "query": "Current price of TSLA",
        "sources": ["yahoo_finance", "bloomberg"],
    },
    "max_iterations": 5,
    "termination_trigger": "yield_control called with the price",
}

# Example 1: Subagent Response, verbatim.
HANDOFF_SUCCESS_RESPONSE: dict[str, Any] = {
    "status": "SUCCESS",
    "output_payload": {
        "price": 175.22,
        "currency": "USD",
        "timestamp": "2023-11-01T14:30:00Z",
    },
}

# Example 2: Partial Completion (Code Refactor) — Subagent Response, verbatim.
HANDOFF_PARTIAL_RESPONSE: dict[str, Any] = {
    "status": "PARTIAL_COMPLETION",
    "output_payload": {
        "modified_files": ["src/auth.py", "src/utils.py"],
        "skipped_files": ["src/legacy.py"],
    },
    "error_report": {
        "code": "ERR_FS_PERM",
        "message": "Permission denied: src/legacy.py",
    },
}

# Anti-pattern "Vague Success Criteria", verbatim, and the protocol's machine-verifiable ones.
HANDOFF_VAGUE_CRITERIA: list[str] = ["Do a good job"]
HANDOFF_VERIFIABLE_CRITERIA: list[str] = ["JSON is schema-valid", "Tests pass", "Word count > 500"]

# =========================================================================================
# the agloop delegation protocol
# =========================================================================================

FEATURE_NAME = "add a search endpoint with pagination so users can find records by keyword"
FEATURE_DESCRIPTION = (
    "Expose GET /api/search over the records table with a keyword query and page/page_size "
    "pagination, reusing the existing handler, validation and auth middleware patterns.")
PLACEHOLDER_FEATURE_NAME = "{verbatim user request}"

_PATHS = {
    "plan_path": ".agloop/plan.yaml",
    "state_path": ".agloop/state.json",
    "log_path": ".agloop/log.json",
}

AGLOOP_RESEARCHER_BASE: dict[str, Any] = {
    "task_id": None,
    "feature_name": FEATURE_NAME,
    "feature_description": "",
    "current_phase": "research",
    "current_state_summary": "Phase: research, 0/0 tasks, starting fresh",
    **_PATHS,
}

AGLOOP_RESEARCHER: dict[str, Any] = {
    "base_params": AGLOOP_RESEARCHER_BASE,
    "researcher_params": {
        "complexity_level": "medium",
        "research_mode": "codebase_plus_latest_guidance",
        "focus_areas": [
            "specific areas to research, e.g. 'authentication patterns in src/auth/'",
            "integration points for the new feature",
        ],
        "known_patterns": ["patterns already identified that researcher should verify/extend"],
        "workspace_root": "/workspace/app",
    },
}

AGLOOP_RESEARCH_OUTPUT: dict[str, Any] = {
    "context_map": {
        "primary_files": [{"path": "src/api/handlers/users.ts", "role": "handler pattern",
                           "key_exports": ["getUsers"]}],
        "secondary_files": [{"path": "src/services/searchService.ts", "role": "search query"}],
        "test_files": [{"path": "tests/api/users.test.ts", "coverage": "handlers"}],
        "patterns_to_follow": [{"pattern": "handler", "example_file": "src/api/handlers/users.ts",
                                "description": "zod-validated Express handler"}],
        "suggested_sequence": ["types", "handler", "route"],
    },
    "findings": {
        "architecture_notes": "Express handlers with zod validation and Prisma services",
        "dependencies": ["zod", "prisma"],
        "constraints": ["must use existing auth system"],
        "risks": ["search performance on large tables"],
    },
    "passes_completed": 2,
    "confidence": "high",
}

AGLOOP_PLANNER: dict[str, Any] = {
    "base_params": {
        "task_id": None,
        "feature_name": FEATURE_NAME,
        "feature_description": FEATURE_DESCRIPTION,
        "current_phase": "plan",
        "current_state_summary": "Phase: plan, research complete, creating implementation plan",
        **_PATHS,
    },
    "planner_params": {
        "research_findings": AGLOOP_RESEARCH_OUTPUT,
        "context_map": AGLOOP_RESEARCH_OUTPUT["context_map"],
        "latest_guidance": {"zod": "use z.coerce.number() for query parameters"},
        "constraints": ["must use existing auth system"],
        "revision_feedback": None,
    },
}

# The commented "non-null on revision" form of revision_feedback.
AGLOOP_REVISION_FEEDBACK: dict[str, Any] = {
    "iteration": 1,
    "objection": "string — critic's strongest objection",
    "suggested_fix": "string — how to address it",
    "previous_plan_path": ".agloop/plan.yaml",
}

AGLOOP_CRITIC: dict[str, Any] = {
    "base_params": {
        "task_id": None,
        "feature_name": FEATURE_NAME,
        "feature_description": FEATURE_DESCRIPTION,
        "current_phase": "critique",
        "current_state_summary": "Phase: critique, iteration 1/3, reviewing plan",
        **_PATHS,
    },
    "critic_params": {
        "plan_yaml_path": ".agloop/plan.yaml",
        "iteration_number": 1,
        "max_iterations": 3,
        "previous_objections": [{
            "iteration": 0,
            "objection": "",
            "response": "",
            "resolved": True,
            "objection_category": "",
            "severity": "",
        }],
        "feature_name": FEATURE_NAME,
        "research_findings": AGLOOP_RESEARCH_OUTPUT,
    },
}

AGLOOP_ACCEPTANCE_CRITERIA: list[str] = [
    "GET /api/search?q=test&page=1&page_size=10 returns 200 with { results: [], total: number, page: number }",
    "Missing query parameter returns 400 with { error: 'Query parameter q is required' }",
    "page_size > 100 returns 400 with { error: 'page_size must be between 1 and 100' }",
    "Route registered in src/config/routes.ts with auth middleware",
]

# The executor template's own six-line checklist (covers items 1-7 of the full list).
AGLOOP_EXECUTOR_TEMPLATE_CHECKLIST: list[str] = [
    "DO NOT skip any acceptance criterion. Confirm each one individually.",
    "DO NOT leave TODO comments, placeholder implementations, or stub functions.",
    "DO NOT return until every requirement is fully implemented.",
    "You MUST create/modify ALL files listed in files_to_modify.",
    "You MUST handle ALL error cases, not just the happy path.",
    "You MUST follow existing codebase patterns identified in context_map.",
]

# "The Complete Checklist": the ten items, verbatim.
AGLOOP_FULL_CHECKLIST: list[str] = [
    "DO NOT leave any TODO comments in the code",
    "DO NOT use placeholder implementations or stub functions",
    "DO NOT skip any acceptance criterion — confirm each one individually",
    "DO NOT return until every requirement is fully implemented",
    "You MUST create or modify ALL files listed in files_to_modify",
    "You MUST handle ALL error cases, not just the happy path",
    "You MUST follow existing codebase patterns (from context_map)",
    "You MUST use the specified technologies — do NOT substitute alternatives",
    "You MUST NOT use any forbidden patterns listed in specification_adherence",
    "Confirm each acceptance criterion with evidence before returning RESULT",
]

# The same checklist as the markdown block the protocol prints.
AGLOOP_CHECKLIST_MARKDOWN = """## Anti-Laziness Enforcement

You MUST satisfy ALL of the following. Partial work is NOT acceptable.

""" + "\n".join(f"- [ ] {item}" for item in AGLOOP_FULL_CHECKLIST) + """

### Task-Specific Enforcement

- [ ] You MUST add input validation using zod (not manual if/else checks)
- [ ] You MUST include the auth middleware on the new route
- [ ] Error responses MUST use the { error: string } format, not plain text
"""

AGLOOP_TASK_SPECIFIC_ITEMS: list[str] = [
    "You MUST add input validation using zod (not manual if/else checks)",
    "You MUST include the auth middleware on the new route",
    "Error responses MUST use the { error: string } format, not plain text",
]

AGLOOP_EXECUTOR_SPEC: dict[str, Any] = {
    "required_patterns": [
        "Use zod for input validation",
        "Follow handler pattern from users.ts",
        "Return { data, meta, error } envelope",
    ],
    "forbidden_patterns": [
        "DO NOT use raw SQL — use Prisma ORM",
        "DO NOT use any for TypeScript types",
        "DO NOT import entire lodash — use specific imports",
    ],
    "tech_choices": [
        "Express.js handler (not Fastify, not Koa)",
        "Zod validation (not Joi, not Yup)",
    ],
}

AGLOOP_TASK_DEFINITION: dict[str, Any] = {
    "id": "task-003",
    "title": "Add search API endpoint with pagination",
    "description": "Create GET /api/search endpoint that accepts query, page, and page_size "
                   "parameters. Returns paginated results matching the query. Use existing "
                   "handler pattern from users.ts.",
    "files_to_modify": [
        "src/api/handlers/search.ts",
        "src/types/api.ts",
        "src/config/routes.ts",
    ],
    "files_to_read": [
        "src/api/handlers/users.ts",
        "src/services/searchService.ts",
        "src/middleware/auth.ts",
    ],
}

# The executor delegation (search endpoint), exactly as the template, base_params nested.
AGLOOP_EXECUTOR: dict[str, Any] = {
    "base_params": {
        "task_id": "task-003",
        "feature_name": FEATURE_NAME,
        "feature_description": FEATURE_DESCRIPTION,
        "current_phase": "execute",
        "current_state_summary": "Phase: execute, Task: task-003 (2/7 done), implementing search handler",
        **_PATHS,
    },
    "executor_params": {
        "task_definition": AGLOOP_TASK_DEFINITION,
        "acceptance_criteria": AGLOOP_ACCEPTANCE_CRITERIA,
        "context_map": {
            "primary_files": AGLOOP_RESEARCH_OUTPUT["context_map"]["primary_files"],
            "patterns_to_follow": AGLOOP_RESEARCH_OUTPUT["context_map"]["patterns_to_follow"],
        },
    },
    "anti_laziness_checklist": AGLOOP_EXECUTOR_TEMPLATE_CHECKLIST,
    "specification_adherence": AGLOOP_EXECUTOR_SPEC,
    "previous_failure": None,
}


def agloop_executor_flat() -> dict[str, Any]:
    """The executor delegation with base params flat at the top level (the other spelling)."""
    packet = copy.deepcopy(AGLOOP_EXECUTOR)
    packet.update(packet.pop("base_params"))
    return packet


# The commented "non-null on fresh-context retry" previous_failure.
AGLOOP_PREVIOUS_FAILURE: dict[str, Any] = {
    "attempt_number": 2,
    "failure_report": "Verifier found page_size validation missing",
    "specific_failures": ["page_size > 100 returns 500 instead of 400"],
    "fix_instructions": "Add zod validation for page_size: z.number().min(1).max(100)",
}


def agloop_executor_retry() -> dict[str, Any]:
    """The executor delegation on its second attempt, with the full checklist."""
    packet = copy.deepcopy(AGLOOP_EXECUTOR)
    packet["previous_failure"] = copy.deepcopy(AGLOOP_PREVIOUS_FAILURE)
    packet["anti_laziness_checklist"] = list(AGLOOP_FULL_CHECKLIST)
    return packet


AGLOOP_EXECUTOR_OUTPUT: dict[str, Any] = {
    "files_modified": ["src/api/handlers/search.ts", "src/types/api.ts", "src/config/routes.ts"],
    "files_deleted": [],
    "acceptance_criteria_confirmation": [
        {"criterion": "GET /api/search?q=test returns 200 with results", "met": True,
         "evidence": "Handler returns res.json({ data: results, meta: { total, page }, error: null })"},
        {"criterion": "Missing q returns 400", "met": True,
         "evidence": "Zod validation rejects missing q param, handler returns 400 with error"},
    ],
    "summary": "Created search endpoint following users.ts handler pattern with zod validation "
               "and Prisma query",
    "warnings": ["Search query currently does exact match — may need full-text search for production"],
}

AGLOOP_VERIFIER: dict[str, Any] = {
    "base_params": {
        "task_id": "task-003",
        "feature_name": FEATURE_NAME,
        "feature_description": FEATURE_DESCRIPTION,
        "current_phase": "verify",
        "current_state_summary": "Phase: verify, Task: task-003, executor reported COMPLETE, "
                                 "awaiting verification",
        **_PATHS,
    },
    "verifier_params": {
        "task_definition": {
            "id": "task-003",
            "title": "Add search API endpoint with pagination",
            "description": "...",
        },
        "acceptance_criteria": AGLOOP_ACCEPTANCE_CRITERIA,
        "executor_result": {
            "files_modified": ["src/api/handlers/search.ts", "src/types/api.ts",
                               "src/config/routes.ts"],
            "summary": "Created search endpoint with zod validation and Prisma query",
            "acceptance_criteria_confirmation": [
                {"criterion": "...", "met": True, "evidence": "..."},
            ],
        },
        "review_depth": "standard",
    },
    "specification_adherence": {
        "required_patterns": [
            "Uses zod for input validation",
            "Follows handler pattern from users.ts",
            "Returns { data, meta, error } envelope",
        ],
        "forbidden_patterns": [
            "No raw SQL — must use Prisma ORM",
            "No 'any' TypeScript types",
        ],
        "tech_choices": [
            "Express.js handler (not Fastify, not Koa)",
            "Zod validation (not Joi, not Yup)",
        ],
    },
}

# "RESULT Block Parsing": a filled-in block at the end of an executor's prose answer.
AGLOOP_RESULT_BLOCK = """I created the search endpoint following the users.ts handler pattern.

## RESULT

- **Status**: COMPLETE
- **Files Modified**: [src/api/handlers/search.ts, src/types/api.ts, src/config/routes.ts]
- **Key Decisions**:
  - Used zod for query validation
  - Reused the Prisma search service
- **Deliverables**: [GET /api/search endpoint with pagination]
- **Needs Followup**: none
- **Blockers**: none
"""

AGLOOP_RESULT_BLOCK_FAILED = """## RESULT

- **Status**: FAILED
- **Failed Reason**: VERIFICATION_FAILED
- **Files Modified**: none
- **Key Decisions**: []
- **Deliverables**: []
- **Needs Followup**: executor: page_size validation missing
- **Blockers**: page_size > 100 returns 500 instead of 400
"""

# The review depth decision tree's security keywords, verbatim.
AGLOOP_SECURITY_KEYWORDS: tuple[str, ...] = (
    "auth", "login", "password", "token", "JWT", "crypto", "encryption",
    "SQL", "query", "injection", "validation", "sanitize", "CORS", "CSRF",
)

# =========================================================================================
# the HandoffPackage format
# =========================================================================================

HANDOFF_PACKAGE: dict[str, Any] = {
    "task": {
        "id": "task-42",
        "type": "research",
        "description": "Summarize the three most cited papers on retrieval-augmented generation",
        "requirements": ["Cite each paper with its DOI", "Keep the summary under 300 words"],
    },
    "context": {
        "originalRequest": "What are the key papers on RAG and what do they say?",
        "completedSteps": [{"agent": "planner", "step": "identified candidate papers"}],
        "intermediateResults": {"candidates": ["Lewis 2020", "Guu 2020", "Borgeaud 2022"]},
        "relevantFiles": ["notes/rag-candidates.md"],
        "decisions": [{"decision": "limit to peer-reviewed papers", "by": "planner"}],
    },
    "metadata": {
        "sourceAgent": "planner",
        "targetAgent": "researcher",
        "timestamp": "2024-05-01T10:00:00Z",
        "priority": 2,
        "deadline": "2024-05-01T12:00:00Z",
        "attempt": 1,
    },
    "expectations": {
        "outputFormat": {
            "type": "object",
            "properties": {
                "summary": {"type": "string"},
                "papers": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["summary", "papers"],
        },
        "successCriteria": ["JSON is schema-valid", "Word count > 100"],
        "timeoutMs": 120000,
    },
}

# =========================================================================================
# delegation contracts: a contract and the result envelope
# =========================================================================================

CONTRACT_GOAL = ("compare three candidate solutions, output a risk matrix with sources, and "
                "perform no external write operations")

DELEGATION_CONTRACT: dict[str, Any] = {
    "goal": CONTRACT_GOAL,
    "allowedInputs": ["project_docs", "candidate_solutions"],
    "inputData": {
        "project_docs": "docs/architecture/",
        "candidate_solutions": ["A: shared cache", "B: per-tenant cache", "C: no cache"],
    },
    "expectedOutput": {
        "type": "object",
        "properties": {
            "riskMatrix": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "solution": {"type": "string"},
                        "risk": {"type": "string"},
                        "likelihood": {"type": "string"},
                        "impact": {"type": "string"},
                        "source": {"type": "string"},
                    },
                    "required": ["solution", "risk", "source"],
                },
            },
        },
        "required": ["riskMatrix"],
    },
    "resourceBoundaries": {
        "maxModelCalls": 20,
        "maxTokens": 50000,
        "maxRuntimeSeconds": 600,
        "maxCostUsd": 1.5,
        "maxConcurrency": 2,
    },
    "capabilityScope": {"capabilities": ["fs_read", "search"]},
    "completionCriteria": ["JSON is schema-valid", "Include at least 2 sources"],
}

# The same contract with its budgets flat at the top level (the other spelling).
DELEGATION_CONTRACT_FLAT: dict[str, Any] = {
    "goal": CONTRACT_GOAL,
    "allowed_inputs": ["project_docs", "candidate_solutions"],
    "input_data": DELEGATION_CONTRACT["inputData"],
    "expected_output": DELEGATION_CONTRACT["expectedOutput"],
    "maxModelCalls": 20,
    "maxTokens": 50000,
    "maxRuntimeSeconds": 600,
    "maxCostUsd": 1.5,
    "maxConcurrency": 2,
    "capabilities": ["fs_read", "search"],
    "completion_criteria": ["JSON is schema-valid", "Include at least 2 sources"],
}

# The result envelope, verbatim.
RESULT_ENVELOPE: dict[str, Any] = {
    "status": "completed",
    "summary": "Among the three solutions, A has the lowest latency, but lacks evidence of "
               "tenant isolation.",
    "evidence": [{"source": "tool:metrics-query", "artifactId": "art_123"}],
    "openQuestions": ["Does A support per-project cache isolation?"],
    "handoff": {"recommendedRole": "security-review",
                "reason": "Isolation model needs verification"},
}

# =========================================================================================
# OpenClaw sub-agents: sessions_spawn and announce
# =========================================================================================

OPENCLAW_SPAWN_PARAMS: dict[str, Any] = {
    "task": "Summarize the open issues labelled 'bug' and group them by component",
    "label": "bug-triage",
    "agentId": "main",
    "model": "smollm2-135m",
    "thinking": "low",
    "runTimeoutSeconds": 300,
    "cleanup": "keep",
}

OPENCLAW_ANNOUNCE: dict[str, Any] = {
    "status": "success",
    "result": "Grouped 12 open bugs into 4 components; auth has the most (5).",
    "notes": "Two issues had no component label and were grouped under 'unknown'.",
    "runtimeSeconds": 42.5,
    "usage": {"inputTokens": 1800, "outputTokens": 350},
}

OPENCLAW_ANNOUNCE_TIMEOUT: dict[str, Any] = {
    "status": "timeout",
    "result": "",
    "error": "run exceeded runTimeoutSeconds (300)",
    "runtimeSeconds": 300.0,
}

# =========================================================================================
# results: a RESULT block with every bullet, an executor answer with its JSON output,
# and an OpenClaw announce's error status
# =========================================================================================

AGLOOP_RESULT_BLOCK_EVERY_BULLET = """The refactor is half done: the handler is in place, the route is not.

## RESULT

- **Status**: PARTIAL
- **Failed Reason**: DEPENDENCY_MISSING
- **Files Modified**:
  - src/api/handlers/search.ts
  - src/types/api.ts
- **Key Decisions**: [Used zod for validation; Kept the users.ts handler shape]
- **Deliverables**: [GET /api/search handler]
- **Needs Followup**: planner: routes.ts belongs to task-004, which does not exist yet
- **Blockers**: src/config/routes.ts is owned by a task that is not planned
"""


def agloop_executor_answer_with_output() -> str:
    """An executor's answer: its executor_output contract in a JSON fence, then the RESULT block."""
    return ("Done. Output contract:\n\n```json\n"
            + json.dumps({"executor_output": AGLOOP_EXECUTOR_OUTPUT}, indent=2)
            + "\n```\n\n## RESULT\n\n- **Status**: COMPLETE\n"
            "- **Files Modified**: src/api/handlers/search.ts, src/types/api.ts, src/config/routes.ts\n"
            "- **Key Decisions**: Followed the users.ts handler pattern\n"
            "- **Deliverables**: GET /api/search\n- **Needs Followup**: verifier: verify task-003\n"
            "- **Blockers**: none\n")


OPENCLAW_ANNOUNCE_ERROR: dict[str, Any] = {
    "status": "error",
    "result": "",
    "error": "GitHub API returned 403 (rate limited)",
    "runtimeSeconds": 3.2,
}
