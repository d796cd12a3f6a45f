"""The runner: executes a hand-off packet as a run, and its children as child runs.

One run goes through three phases (``orchestrator.Runner`` tells them in this order):

accept (``acceptance``)
    ``PENDING``: the packet is validated (``parse_packet`` unless it already is a
    HandoffPacket), the skill it names is resolved through the host's ``skills`` resolver
    and merged in with its ``skill`` pinned to ``name@version`` (the ``PENDING`` event
    carries it; a skill the resolver lacks or refuses, with a ProtocolError, rejects the
    run with that message), linted (lint errors -> ``REJECTED`` with the findings in the outcome,
    the ``error`` event and the ``result`` event), ``input_data`` is checked against the
    skill's ``input_schema``, the depth against ``max_depth`` (the smaller of the packet's
    and ``RunnerSettings.max_depth``), and budget and capabilities against the parent's:
    lint's severity for ``BUDGET_EXCEEDS_PARENT`` / ``CAPABILITY_EXCEEDS_PARENT`` decides
    between rejecting and narrowing (``budgets.narrow`` / ``narrow_capabilities``; a child
    never gets more than its parent has left). Then ``ACCEPTED`` -> ``WORKING``; the run
    gets a capability token (``issue_token``, expiring with its timeout).
work (``model_turns``, ``tool_calls``, ``children``)
    Up to ``max_iterations`` model calls (the smaller of the packet's and the budget's).
    Text deltas stream as ``text`` events (coalesced: one event per
    ``RunnerSettings.text_flush_chars`` characters or ``text_flush_s`` seconds), every call
    is a ``model_call`` event and is metered and charged to the run and all its
    ancestors. Tool calls run with ``tool_call`` / ``tool_result`` events; every
    capability tool is checked against the run's token first, approval-required
    capabilities go through the gate (``questions``): the run's own set, settled at
    acceptance and inherited by its children, is ``RunnerSettings.approval_required`` plus,
    for a skill with ``requires_approval``, its approval-class capabilities. ``delegate_task`` calls of one turn
    run concurrently as child runs; each child's announce (OpenClaw sub-agents) becomes the
    tool result its parent's model reads. A failed tool call is reported to the model with
    its error; one that repeats an earlier failed call exactly (same tool and arguments)
    also carries a ``hint`` saying so.
    The last model call a run is allowed is forced (``model_turns.last_call_reason``): the
    model is offered only ``yield_control``, with a tool choice naming it, and a user
    message says why ("This is your last turn: you have used 4 of 5 model calls ..."); a
    ``log`` event with ``last_turn: true`` marks it. A call is the last when
    ``max_iterations`` is reached with it, when it takes the last of a ``max_model_calls``
    budget (the run's or an ancestor's), or when another call the size of the run's
    previous one would use up a token or cost limit. A forced turn that calls other tools
    without ``yield_control`` runs none of them and ends the run FAILED
    (ERR_RESOURCE_EXHAUSTED); its ``yield_control`` is judged even when the call
    overshot a token or cost limit.
finish (``judging``, ``reporting``)
    The answer is parsed, validated and checked against the success criteria; a result
    that fails gets one self-correction turn (the hand-off protocol), a FAILURE follows the
    agloop retry table, ``BLOCKED_AWAITING_CLARIFICATION`` asks a person. The run ends with
    a ``state`` event, an ``announce`` event (status, summary, error, runtime, usage,
    result) and the ``result`` event ``{state, result, criteria_report, usage}``, always
    the run's last event (``events.announce_data`` / ``events.result_data``).
    A run never ends FAILED, TIMEOUT or CANCELLED with no result (the hand-off protocol:
    no silent failure): when no answer of the model gave one (a hard timeout, a
    cancellation, a provider error, a forced last turn ignored, a script that ran out) the
    runner writes a FAILURE result itself (``reporting.runner_failure``): its
    ``error_report`` is the run's ``error`` (code, message, the agloop failed reason where
    one fits the code; ``details.written_by == "runner"``) and its ``summary`` the error
    message plus what was done so far (model calls, tool calls, the last results). Only a
    REJECTED run, which never worked, has no result.

Decisions worth knowing:

- Who may delegate: the root run (depth 0) is the coordinator and is always offered
  ``delegate_task`` while depth < max_depth, unless it runs a skill; a child, and a root
  running a skill (a specialist), is offered it only when its packet says
  ``allow_nested`` (OpenClaw sub-agents do not spawn by default). A child inherits
  ``allow_nested``, ``max_depth``, the workspace folder and (unless its ``delegate_task``
  arguments name ``capabilities``) the parent's capabilities, all narrowed. A
  ``delegate_task`` call where it is not offered is refused with ERR_CONSTRAINT_VIOLATION.
- Child labels: the ``label`` argument, else ``subagent_type``, else ``child-N``; the
  child's adapter is ``adapter.for_child(label)``; its session key is
  ``sessions.session_key(agent id, child run id)`` (``agent:<agentId>:subagent:<uuid>``;
  agentId: the packet's ``agent_id``, else the parent's, else ``main``).
- A model turn whose ``finish_reason`` is :data:`~delegations.protocol.tools.FINISH_WITH_CHILDREN`
  finishes the run, once that turn's ``delegate_task`` calls are done, with
  ``output_payload = {"children": [{label, run_id, state, result}, ...]}`` and no further
  model call (SUCCESS when every child succeeded, PARTIAL_COMPLETION when some did,
  FAILURE when none did). The scripted adapter's ``"finish": "children"`` turn uses it.
- Termination trigger: when the model's text contains the packet's
  ``termination_trigger`` the run ends with that turn: tool calls other than
  ``yield_control`` are not executed; the result is the ``yield_control`` call, else what
  ``parse_result`` reads in the text, else a SUCCESS whose summary is the text before the
  trigger. Validation and criteria still apply, without a correction turn.
- Budgets: before a model call, ``hard_limit_hit`` on the run or any ancestor (usage at
  or beyond a limit) ends the run FAILED with ERR_RESOURCE_EXHAUSTED; after a call, a
  call that overshot a token or cost limit does the same. The soft threshold is checked
  on the run's own budget, once per axis (kind ``budget``); a rejection ends the run with
  ERR_RESOURCE_EXHAUSTED. The wall-clock limit is the hard timeout: ``timeout_s``, else
  ``budget.max_runtime_s``, else ``RunnerSettings.default_timeout_s``, never beyond the
  parent's deadline; time spent parked (no worker) does not count.
- Parking: when the gate raises ``RunParked`` the run checkpoints and returns
  ``AWAITING_APPROVAL`` with ``parked`` set. A parked child makes its parent park too once
  the child's siblings have finished or parked; :meth:`Runner.resume` always resumes the
  whole tree from its root, and a parked child is resumed from its own checkpoint, never
  spawned again.
- Checkpoints (``checkpointing``) are saved at acceptance, after every model call, after
  every tool call (before its ``tool_result`` event), after each turn, when parking and at
  the end. A tool call whose result is in the checkpoint is never executed again.
- Approval keys are ``<run id>:<kind>:<step>`` (``questions``): the same question asked
  again after a resume has the same key.
- Cancellation: a root run works in the task that called ``start()`` / ``resume()``;
  ``cancel()`` cancels that task (the runner consumes the cancellation once the tree has
  stopped and returns the CANCELLED outcome), while a host cancelling its own task gets
  the CancelledError back after the tree recorded CANCELLED. Children are tasks of their
  own; every one is awaited before its parent ends, so none outlives the tree. A
  cancelled run's ``error`` is ``{"code": "CANCELLED", "message": why}`` (no ``error``
  event: a cancellation is not a failure); its result is the runner's FAILURE with code
  CANCELLED.
- The runner never lets a bad run raise into the host: provider errors
  (ProtocolError from the adapter) end the run FAILED with their code and message; any
  other exception ends it FAILED with ERR_TOOL_FAILURE and an ``error`` event. Only
  exceptions that are not ``Exception`` (a dying worker) propagate.
"""

from ..sessions import new_run_id
from .acceptance import SkillResolver
from .orchestrator import Runner
from .outcome import RunOutcome
from .prompt import PROTOCOL_GUIDE
from .reporting import failure_result
from .settings import RunnerSettings

__all__ = ["PROTOCOL_GUIDE", "RunOutcome", "Runner", "RunnerSettings", "SkillResolver",
           "failure_result", "new_run_id"]
