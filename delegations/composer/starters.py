"""Starting points the composer offers: one well-formed packet per agloop role, and the
hand-off protocol's own examples (a ``delegate_task`` call, a delegation contract, an
OpenClaw ``sessions_spawn``), each written in its own dialect.

Every packet here lints without errors, so a person can run one as it is and change it
from there; the example values (a search endpoint, a TSLA price) are the protocols' own.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from delegations.protocol.lint import STANDARD_CHECKLIST

CHECKLIST: list[str] = [item for item, _ in STANDARD_CHECKLIST]
FEATURE_NAME = "add a search endpoint with pagination so users can find records by keyword"
FEATURE_DESCRIPTION = (
    "Expose GET /api/search over the records table with a keyword query and page/page_size "
    "pagination, reusing the existing handler, validation and auth middleware patterns.")
ACCEPTANCE_CRITERIA: list[str] = [
    "GET /api/search?q=test&page=1&page_size=10 returns 200 with { results: [], total: number, page: number }",
    "Missing query parameter returns 400 with { error: 'Query parameter q is required' }",
    "page_size > 100 returns 400 with { error: 'page_size must be between 1 and 100' }",
    "Route registered in src/config/routes.ts with auth middleware",
]
TASK_DEFINITION: dict[str, Any] = {
    "id": "task-003",
    "title": "Add search API endpoint with pagination",
    "description": "Create GET /api/search endpoint that accepts query, page, and page_size parameters. "
                   "Returns paginated results matching the query. Use existing handler pattern from users.ts.",
    "files_to_modify": ["src/api/handlers/search.ts", "src/types/api.ts", "src/config/routes.ts"],
    "files_to_read": ["src/api/handlers/users.ts", "src/services/searchService.ts", "src/middleware/auth.ts"],
}
CONTEXT_MAP: dict[str, Any] = {
    "primary_files": [{"path": "src/api/handlers/users.ts", "role": "handler pattern", "key_exports": ["getUsers"]}],
    "patterns_to_follow": [{"pattern": "handler", "example_file": "src/api/handlers/users.ts",
                            "description": "zod-validated Express handler"}],
}
RESEARCH_FINDINGS: dict[str, Any] = {
    "context_map": CONTEXT_MAP,
    "findings": {"architecture_notes": "Express handlers with zod validation and Prisma services",
                 "constraints": ["must use existing auth system"],
                 "risks": ["search performance on large tables"]},
    "confidence": "high",
}
SPECIFICATION: dict[str, Any] = {
    "required_patterns": ["Use zod for input validation", "Follow handler pattern from users.ts"],
    "forbidden_patterns": ["DO NOT use raw SQL — use Prisma ORM", "DO NOT use any for TypeScript types"],
    "tech_choices": ["Express.js handler (not Fastify, not Koa)", "Zod validation (not Joi, not Yup)"],
}
_PATHS = {"plan_path": ".agloop/plan.yaml", "state_path": ".agloop/state.json", "log_path": ".agloop/log.json"}


@dataclass(frozen=True, slots=True)
class Starter:
    key: str
    title: str
    description: str
    packet: dict[str, Any]

    def packet_copy(self) -> dict[str, Any]:
        """The packet, safe to change."""
        return copy.deepcopy(self.packet)


def _base(phase: str, summary: str, task_id: str | None = None) -> dict[str, Any]:
    return {"task_id": task_id, "feature_name": FEATURE_NAME, "feature_description": FEATURE_DESCRIPTION,
            "current_phase": phase, "current_state_summary": summary, **_PATHS}


def _agloop(role: str, goal: str, base: dict[str, Any], params: dict[str, Any],
            output: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An agloop delegation for ``role``, with what every run needs to be checked and bounded."""
    return {
        "subagent_type": role, "goal": goal, "base_params": base, f"{role}_params": params,
        "allowed_inputs": [],   # an agloop delegation passes its inputs as role params, not input_data
        "expected_output_schema": output, "success_criteria": ["JSON is schema-valid"],
        "anti_laziness_checklist": CHECKLIST, "timeout_s": 600,
        "budget": {"max_model_calls": 20, "max_tokens": 100_000}, **extra,
    }


STARTERS: tuple[Starter, ...] = (
    Starter("agloop-researcher", "Researcher (agloop)",
            "Maps the codebase for a feature and reports the files and patterns to follow.",
            _agloop("researcher", "Research the codebase for the search endpoint and report a context map",
                    _base("research", "Phase: research, 0/0 tasks, starting fresh"),
                    {"complexity_level": "medium", "research_mode": "codebase_plus_latest_guidance",
                     "focus_areas": ["request handlers in src/api/handlers/", "integration points for search"],
                     "known_patterns": ["zod-validated Express handlers"], "workspace_root": "/workspace/app"},
                    {"context_map": "object", "findings": "object", "confidence": "string"})),
    Starter("agloop-planner", "Planner (agloop)",
            "Turns research findings into a plan of tasks with acceptance criteria.",
            _agloop("planner", "Plan the search endpoint as tasks with acceptance criteria",
                    _base("plan", "Phase: plan, research complete, creating implementation plan"),
                    {"research_findings": RESEARCH_FINDINGS, "context_map": CONTEXT_MAP,
                     "latest_guidance": {"zod": "use z.coerce.number() for query parameters"},
                     "constraints": ["must use existing auth system"]},
                    {"plan_path": "string", "tasks": "array"})),
    Starter("agloop-critic", "Critic (agloop)",
            "Challenges a plan before it is built and returns its strongest objection.",
            _agloop("critic", "Review the plan for the search endpoint and raise the strongest objection",
                    _base("critique", "Phase: critique, iteration 1/3, reviewing plan"),
                    {"plan_yaml_path": ".agloop/plan.yaml", "iteration_number": 1, "max_iterations": 3,
                     "feature_name": FEATURE_NAME, "research_findings": RESEARCH_FINDINGS,
                     "previous_objections": []},
                    {"approved": "boolean", "objection": "string"})),
    Starter("agloop-executor", "Executor (agloop)",
            "Implements one planned task and confirms each acceptance criterion with evidence.",
            _agloop("executor", "Implement task-003: the search endpoint with pagination",
                    _base("execute", "Phase: execute, Task: task-003 (2/7 done), implementing search handler",
                          "task-003"),
                    {"task_definition": TASK_DEFINITION, "acceptance_criteria": ACCEPTANCE_CRITERIA,
                     "context_map": CONTEXT_MAP},
                    {"files_modified": "array", "summary": "string"},
                    specification_adherence=SPECIFICATION, capabilities=["fs_read", "fs_write"])),
    Starter("agloop-verifier", "Verifier (agloop)",
            "Checks that a task was done as specified, criterion by criterion.",
            _agloop("verifier", "Verify task-003 against its acceptance criteria",
                    _base("verify", "Phase: verify, Task: task-003, executor reported COMPLETE, "
                                    "awaiting verification", "task-003"),
                    {"task_definition": {key: TASK_DEFINITION[key] for key in ("id", "title", "description")},
                     "acceptance_criteria": ACCEPTANCE_CRITERIA,
                     "executor_result": {"files_modified": TASK_DEFINITION["files_to_modify"],
                                         "summary": "Created search endpoint with zod validation and Prisma query"},
                     "review_depth": "full"},
                    {"verdict": "string", "failures": "array"},
                    review_depth="full", specification_adherence=SPECIFICATION,
                    capabilities=["fs_read"])),
    Starter("handoff-researcher", "Researcher (hand-off protocol)",
            "A delegate_task call: look up a price and answer with it and its currency.",
            {"subagent_type": "researcher",
             "instruction_set": "You are a market data researcher. Look up the current price and "
                                "return it with its currency.",
             "input_data": {"query": "Current price of TSLA", "sources": ["yahoo_finance", "bloomberg"]},
             "allowed_inputs": ["query", "sources"],
             "expected_output_schema": {"price": "number", "currency": "string"},
             "success_criteria": ["JSON is schema-valid"],
             "max_iterations": 5, "termination_trigger": "yield_control called with the price",
             "timeout_s": 300, "budget": {"max_model_calls": 10, "max_tokens": 50_000},
             "capabilities": ["search"]}),
    Starter("handoff-coder", "Coder (hand-off protocol)",
            "A delegate_task call: change one function and list the files it modified.",
            {"subagent_type": "coder",
             "instruction_set": "You are a careful programmer. Make login() authenticate the user, "
                                "keep the rest of the file as it is, and list the files you changed.",
             "input_data": {"file": "src/auth.py", "function": "login"},
             "allowed_inputs": ["file", "function"],
             "expected_output_schema": {"modified_files": "array", "summary": "string"},
             "success_criteria": ["JSON is schema-valid"],
             "max_iterations": 5, "termination_trigger": "yield_control called with the modified files",
             "timeout_s": 600, "budget": {"max_model_calls": 20, "max_tokens": 100_000},
             "capabilities": ["fs_read", "fs_write"]}),
    Starter("delegation-contract", "Delegation contract",
            "Compare three options and return a risk matrix with sources, writing nothing outside.",
            {"goal": "compare three candidate solutions, output a risk matrix with sources, and "
                     "perform no external write operations",
             "allowedInputs": ["project_docs", "candidate_solutions"],
             "inputData": {"project_docs": "docs/architecture/",
                           "candidate_solutions": ["A: shared cache", "B: per-tenant cache", "C: no cache"]},
             "expectedOutput": {
                 "type": "object",
                 "properties": {"riskMatrix": {"type": "array", "items": {
                     "type": "object",
                     "properties": {"solution": {"type": "string"}, "risk": {"type": "string"},
                                    "source": {"type": "string"}},
                     "required": ["solution", "risk", "source"]}}},
                 "required": ["riskMatrix"]},
             "resourceBoundaries": {"maxModelCalls": 20, "maxTokens": 50_000, "maxRuntimeSeconds": 600,
                                    "maxCostUsd": 1.5, "maxConcurrency": 2},
             "capabilityScope": {"capabilities": ["fs_read", "search"]},
             "completionCriteria": ["JSON is schema-valid"],
             "timeout_s": 600}),
    Starter("openclaw-spawn", "OpenClaw sessions_spawn",
            "A background sub-agent run: triage open bugs and group them by component.",
            {"task": "Summarize the open issues labelled 'bug' and group them by component",
             "label": "bug-triage", "agentId": "main", "thinking": "low",
             "runTimeoutSeconds": 300, "cleanup": "keep"}),
)
BY_KEY: dict[str, Starter] = {starter.key: starter for starter in STARTERS}
