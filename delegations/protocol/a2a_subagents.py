"""Remote A2A agents as subagents: a skill of a configured agent runs as a child run (or a
root run) whose "model" is that agent, called through :mod:`.a2a_client`.

A remote skill is named ``<agent>/<skill>`` (``pricing/quote@1.0.0``), as a packet's
``skill`` or through the tool ``a2a__<agent>__<skill>`` a run's model is offered for it
(the runner turns that call into a ``delegate_task`` of the remote skill). Either way the
remote work is a run of its own in the tree, with the whole runner around it: its budget
(each message sent is a model call and costs the agent's declared price; its time is the
run's, and the remote task is cancelled when it runs out or the run is cancelled), its
capability (the agent's, which the run must hold, and which a person approves first when
it is approval-required), and its result judged like any other: ``parse_result``, the
expected output schema and the success criteria.

:class:`RemoteAgentAdapter` speaks for the remote agent in the run's model turns:

- the first turn sends the packet's ``input_data`` as a data part and its goal as text
  (unless the input breaks the input schema the remote's card declares for the skill, as a
  Handoff remote's does: then nothing is sent and the run fails with the reason);
- the remote's COMPLETED artifact becomes a ``yield_control`` SUCCESS (a Handoff remote's
  artifact is its ``ResponsePackage``: its ``output_payload`` and summary are taken), or a
  FAILURE when it breaks the output schema the remote declares;
- FAILED, REJECTED or CANCELED, or a remote that is down, answers a card that does not
  parse or streams garbage, becomes a ``yield_control`` FAILURE with the reason;
- INPUT_REQUIRED and AUTH_REQUIRED become BLOCKED_AWAITING_CLARIFICATION, a question in the
  local inbox: for INPUT_REQUIRED the remote's question, whose answer goes back to the
  remote task as a follow-up message; for AUTH_REQUIRED the remote's sign-in or approval
  request (a Handoff remote names the item in its own inbox), answered once it is granted
  there, after which the task is read again (still waiting: the question is asked again).
  Rejecting the question fails the run, and the remote task is cancelled.

The remote task and context ids are the adapter's state, checkpointed the moment the first
event names them, so a worker that resumes the run follows the task instead of sending it
twice. Nothing of ``a2a`` is imported until a message is sent.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from .a2a_client import (
    INTERRUPTED,
    RemoteAgentConfig,
    RemoteAgentError,
    RemoteOutcome,
    cancel,
    delegate,
)
from .adapters.base import Message, ModelAdapter, ModelTurn, TextCallback, ToolCall, ToolSchema
from .errors import ErrorCode, ProtocolError
from .redaction import Redactor
from .schemas import validate_instance
from .tools import YIELD_CONTROL

if TYPE_CHECKING:
    from .checkpoints import Checkpoint

A2A_PREFIX = "a2a__"
REMOTE_ADAPTER = "a2a"
# a run that completed has nothing left remotely; one that parked waits for the answer
_KEEPS_REMOTE_TASK = frozenset({"COMPLETE", "AWAITING_APPROVAL"})
_NOT_A_NAME_CHARACTER = re.compile(r"[^A-Za-z0-9_-]")
# a remote task is followed for at most this long by one turn; the run's own timeout (and
# its cancellation) stop it earlier, cancelling the remote task
_FOLLOW_LIMIT_S = 24 * 3600.0
# what the model passes when it calls a remote skill's tool
_PARAMETERS = {
    "type": "object",
    "properties": {
        "goal": {"type": "string", "description": "What the remote agent should do, in a sentence or two."},
        "input": {"type": "object", "description": "The data it works on (sent as a data part)."},
    },
    "required": ["goal"],
}


def is_remote_tool(name: str) -> bool:
    return name.startswith(A2A_PREFIX)


def remote_tool_name(agent: str, skill: str) -> str:
    """The name a run's model calls ``skill`` of ``agent`` by (skill ids may hold '@' and
    '.', which tool names may not)."""
    return f"{A2A_PREFIX}{agent}__{_NOT_A_NAME_CHARACTER.sub('_', skill)}"


def remote_ref(agent: str, skill: str) -> str:
    """The skill reference a packet names a remote skill by: ``<agent>/<skill>``."""
    return f"{agent}/{skill}"


def parse_remote_ref(ref: str | None) -> tuple[str, str] | None:
    """``(agent, skill)`` of a remote skill reference, None for a registry skill's (whose
    names hold no '/')."""
    agent, slash, skill = (ref or "").partition("/")
    return (agent, skill) if slash and agent and skill else None


def capability_problem(ref: str, capability: str, capabilities: Iterable[str]) -> str | None:
    """Why a run holding ``capabilities`` may not use the remote skill ``ref``, whose agent
    needs ``capability`` (None when it may): lint and the runner say the same."""
    if capability in capabilities:
        return None
    return (f"The remote skill {ref} needs the capability '{capability}': add it to the packet's "
            f"capabilities (a subagent gets it only if its parent has it).")


@dataclass(frozen=True, slots=True)
class RemoteSkill:
    """One skill of a remote agent."""

    tool: str                 # a2a__<agent>__<skill>
    ref: str                  # <agent>/<skill>
    agent: RemoteAgentConfig
    skill: str

    @property
    def capability(self) -> str:
        return self.agent.capability


class RemoteAgents:
    """The skills of a host's remote agents, for the runs it executes."""

    def __init__(self, agents: Sequence[RemoteAgentConfig], *,
                 environ: Mapping[str, str] | None = None) -> None:
        self.environ = environ if environ is not None else os.environ
        skills = [RemoteSkill(remote_tool_name(agent.name, skill), remote_ref(agent.name, skill), agent, skill)
                  for agent in agents for skill in agent.skills]
        self._by_tool = {remote.tool: remote for remote in skills}
        self._by_ref = {remote.ref: remote for remote in skills}

    def schemas(self, capabilities: Iterable[str]) -> list[dict[str, Any]]:
        """The tools of the skills whose agent's capability is among ``capabilities``."""
        granted = frozenset(capabilities)
        return [{"name": remote.tool,
                 "description": f"Delegate to the skill '{remote.skill}' of the remote A2A agent "
                                f"'{remote.agent.name}' (a subagent of its own); returns its result.",
                 "parameters": _PARAMETERS}
                for remote in self._by_tool.values() if remote.capability in granted]

    def names(self, capability: str) -> list[str]:
        return [remote.tool for remote in self._by_tool.values() if remote.capability == capability]

    def by_tool(self, name: str) -> RemoteSkill | None:
        return self._by_tool.get(name)

    def by_ref(self, ref: str | None) -> RemoteSkill | None:
        return self._by_ref.get(ref) if ref else None

    def delegation(self, remote: RemoteSkill, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The ``delegate_task`` arguments a call of ``remote``'s tool stands for."""
        goal, input_data = arguments.get("goal"), arguments.get("input", {})
        return {"goal": goal if isinstance(goal, str) else "", "skill": remote.ref, "label": remote.ref,
                "input_data": input_data if isinstance(input_data, dict) else {}}

    def adapter(self, remote: RemoteSkill, *, goal: str = "",
                input_data: dict[str, Any] | None = None) -> RemoteAgentAdapter:
        return RemoteAgentAdapter(remote, environ=self.environ, goal=goal, input_data=input_data or {})


def remote_adapter_of(agents: RemoteAgents | None, checkpoint: Checkpoint) -> RemoteAgentAdapter | None:
    """The adapter a checkpointed run of a remote skill goes on with (None for any other
    run); ERR_INVALID_ADAPTER_CONFIG when its agent is no longer configured here."""
    if checkpoint.adapter_name != REMOTE_ADAPTER:
        return None
    ref = str(checkpoint.adapter_config.get("model") or "")
    remote = agents.by_ref(ref) if agents is not None else None
    if agents is None or remote is None:
        raise ProtocolError(ErrorCode.INVALID_ADAPTER_CONFIG,
                            f"The remote skill {ref} is no longer configured here (its remote agent "
                            f"was removed, disabled or no longer allows it), so its run cannot go on.")
    return agents.adapter(remote)


class RemoteAgentAdapter(ModelAdapter):
    """The remote agent in a run's model turns (see the module's docstring)."""

    name: ClassVar[str] = REMOTE_ADAPTER

    def __init__(self, remote: RemoteSkill, *, environ: Mapping[str, str], goal: str,
                 input_data: dict[str, Any]) -> None:
        super().__init__({"agent": remote.agent.name, "skill": remote.skill, "model": remote.ref})
        self.remote = remote
        self.environ = environ
        # told the remote task's id once it is known (the runner checkpoints and logs it)
        self.on_task: Callable[[str], Awaitable[None]] | None = None
        self.state: dict[str, Any] = {"goal": goal, "input": input_data, "task_id": "", "context_id": "",
                                      "waiting": "", "seen": 0}
        self._sent = 0          # the messages the last turn sent (each is charged as a call)
        agent = remote.agent
        self._scrub = Redactor([environ.get(agent.secret_env, "")] if agent.secret_env else [])

    def for_child(self, label: str) -> ModelAdapter:
        raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION,
                            f"{self.remote.ref} is a remote agent's skill: it delegates on its own side.")

    def export_state(self) -> dict[str, Any]:
        return dict(self.state)

    def restore_state(self, state: dict[str, Any]) -> None:
        self.state.update({key: state[key] for key in self.state if key in state})

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float | None:
        return self.remote.agent.price_per_call_usd * self._sent

    async def complete(self, messages: list[Message], tools: list[ToolSchema], *,
                       on_text: TextCallback | None = None, tool_choice: str | None = None) -> ModelTurn:
        state = self.state
        said = _said_since(messages, int(state["seen"]))
        state["seen"] = len(messages)
        self._sent = 0
        if state["task_id"] and not state["waiting"] and said:
            # the remote task has ended and the runner asks for a correction it cannot make
            return _turn(len(messages), self.remote, {"status": "FAILURE", "summary": "The remote agent's result was not accepted.",
                                       "error_report": {"code": ErrorCode.INVALID_RESULT.value, "message": (
                                           f"The remote task {state['task_id']} has ended, so its result "
                                           f"cannot be corrected: {said[:500]}")}})
        answer = said if state["waiting"] == "input" else ""
        try:
            outcome = await delegate(
                self.remote.agent, skill=self.remote.skill, input_data=dict(state["input"]),
                goal=str(state["goal"]), deadline_s=_FOLLOW_LIMIT_S, task_id=str(state["task_id"]),
                context_id=str(state["context_id"]), answer=answer, on_task=self._remember,
                environ=self.environ)
        except RemoteAgentError as exc:
            return _turn(len(messages), self.remote, _failure(self.remote, self._scrub.text(exc.message)))
        self._sent = outcome.messages
        return _turn(len(messages), self.remote, self._answer(outcome))

    async def release(self, state: str) -> None:
        """The run ended (or parked) in ``state``: a remote task it leaves waiting for an
        answer nobody will give now (a question refused, a failure meanwhile) is cancelled."""
        if state in _KEEPS_REMOTE_TASK or not self.state["waiting"] or not self.state["task_id"]:
            return
        await cancel(self.remote.agent, str(self.state["task_id"]), environ=self.environ)
        self.state["waiting"] = ""

    async def _remember(self, task_id: str, context_id: str) -> None:
        """Keep the remote task's ids, and say so the moment the first is known."""
        first = not self.state["task_id"]
        self.state.update(task_id=task_id, context_id=context_id or self.state["context_id"], waiting="")
        if first and self.on_task is not None:
            await self.on_task(task_id)

    def _answer(self, outcome: RemoteOutcome) -> dict[str, Any]:
        """The ``yield_control`` arguments for how the remote task stands."""
        said = self._scrub.text(outcome.status_text)[:1000]
        if outcome.state in INTERRUPTED:
            self.state["waiting"] = "input" if outcome.state == "TASK_STATE_INPUT_REQUIRED" else "auth"
            agent = self.remote.agent.name
            question = (f"The remote agent '{agent}' asks: {said or 'more input'}"
                        if self.state["waiting"] == "input" else
                        f"The remote agent '{agent}' needs an authorization before it goes on: "
                        f"{said or 'no details given'}. Grant it there, then answer here (what you "
                        f"write is passed on); reject to stop its task.")
            return {"status": "BLOCKED_AWAITING_CLARIFICATION", "summary": question,
                    "open_questions": [question], "output_payload": {}}
        self.state["waiting"] = ""
        if outcome.state != "TASK_STATE_COMPLETED":
            return _failure(self.remote, f"its task {outcome.task_id} ended {outcome.state}: {said or 'no message'}")
        data = self._scrub.value(outcome.result) or {}
        summary = said or None
        if isinstance(data.get("output_payload"), dict) and "status" in data:
            # a Handoff remote hands back its ResponsePackage: its payload is the answer
            data, summary = data["output_payload"], data.get("summary") or summary
        issues = validate_instance(outcome.output_schema, data, "output_payload") if outcome.output_schema else []
        if issues:
            return _failure(self.remote, f"its result does not match the output schema it declares "
                                         f"({issues[0].field}: {issues[0].message})")
        return {"status": "SUCCESS", "output_payload": data, "summary": summary}


def _said_since(messages: list[Message], seen: int) -> str:
    """What people (or the runner) said to the run since the adapter last looked."""
    texts = [str(message.get("content") or "") for message in messages[seen:] if message.get("role") == "user"]
    return "\n".join(text.removeprefix("Answer to your question: ") for text in texts if text.strip())


def _failure(remote: RemoteSkill, reason: str) -> dict[str, Any]:
    message = f"The remote agent '{remote.agent.name}' (skill '{remote.skill}') failed: {reason}"
    return {"status": "FAILURE", "summary": message, "output_payload": {},
            "error_report": {"code": ErrorCode.TOOL_FAILURE.value, "message": message,
                             "details": {"agent": remote.agent.name, "skill": remote.skill}}}


def _turn(step: int, remote: RemoteSkill, answer: dict[str, Any]) -> ModelTurn:
    """The remote's answer as a turn calling ``yield_control`` (a call id per turn)."""
    return ModelTurn(tool_calls=[ToolCall(f"remote-{step}", YIELD_CONTROL, answer)], model=remote.ref,
                     finish_reason="tool_calls")
