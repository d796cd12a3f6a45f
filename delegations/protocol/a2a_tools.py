"""Remote A2A agents for runs: each allowed skill of a configured agent offered to a run's
model as a tool ``a2a__<agent>__<skill>``, called through :mod:`.a2a_client`.

The host hands the runner a :class:`RemoteAgents` built from the agents an operator
configured (:class:`~.a2a_client.RemoteAgentConfig`). A run is offered the skills whose
agent's capability its token covers; the runner checks the token and the approval gate for
them as for any tool call, then :meth:`RemoteAgents.call` delegates within what is left of
the run's time (the remote task is cancelled when it runs out). Each message sent counts as
a model call and costs the agent's declared price. The remote task id is handed to the
caller as soon as it is known, so a resumed worker reads the task again instead of sending
it twice. A remote task that ends in anything but COMPLETED, or stops to ask for input or
sign-in (not relayed to the local inbox: the call fails with the remote's words and the
remote task is cancelled, so it does not wait for an answer nobody gives), is an
ERR_TOOL_FAILURE naming agent and skill, and the run goes on. Nothing of ``a2a`` is
imported until a call is made.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .a2a_client import INTERRUPTED, RemoteAgentConfig, RemoteAgentError, cancel, delegate
from .budgets import Usage
from .errors import ErrorCode, ProtocolError
from .redaction import Redactor

A2A_PREFIX = "a2a__"
_NOT_A_NAME_CHARACTER = re.compile(r"[^A-Za-z0-9_-]")
# what a remote may be asked for inside one call: its answer stays small enough for a prompt
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


@dataclass(frozen=True, slots=True)
class RemoteSkill:
    """One skill of a remote agent, as a run's tool."""

    name: str
    capability: str
    schema: dict[str, Any]
    agent: RemoteAgentConfig
    skill: str


class RemoteAgents:
    """The skills of a host's remote agents for the runs it executes."""

    def __init__(self, agents: Sequence[RemoteAgentConfig], *, result_max_bytes: int,
                 environ: Mapping[str, str] | None = None) -> None:
        self.result_max_bytes = result_max_bytes
        self.environ = environ if environ is not None else os.environ
        self._skills = {remote_tool_name(agent.name, skill): RemoteSkill(
            remote_tool_name(agent.name, skill), agent.capability, {
                "name": remote_tool_name(agent.name, skill),
                "description": f"Delegate to the skill '{skill}' of the remote A2A agent "
                               f"'{agent.name}'; returns its result.",
                "parameters": _PARAMETERS}, agent, skill)
            for agent in agents for skill in agent.skills}

    def schemas(self, capabilities: Iterable[str]) -> list[dict[str, Any]]:
        granted = frozenset(capabilities)
        return [remote.schema for remote in self._skills.values() if remote.capability in granted]

    def names(self, capability: str) -> list[str]:
        return [remote.name for remote in self._skills.values() if remote.capability == capability]

    def get(self, name: str) -> RemoteSkill | None:
        return self._skills.get(name)

    async def call(self, remote: RemoteSkill, arguments: dict[str, Any], *, deadline_s: float,
                   usage: Usage, task_id: str = "",
                   on_task: Callable[[str], Awaitable[None]] | None = None) -> dict[str, Any]:
        """Run ``remote`` (or follow its task ``task_id``, sent before) to its end within
        ``deadline_s``; its answer, or ERR_TOOL_FAILURE with the reason."""
        goal, input_data = arguments.get("goal"), arguments.get("input", {})
        if not isinstance(goal, str) or not goal.strip() or not isinstance(input_data, dict):
            raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION,
                                f"{remote.name} takes 'goal' (a non-empty string) and 'input' (an object).")
        agent = remote.agent
        if not task_id:    # one message is sent: charged even if the remote then fails
            usage.charge(model_calls=1, cost_usd=agent.price_per_call_usd)
        try:
            outcome = await delegate(agent, skill=remote.skill, input_data=input_data, goal=goal,
                                     deadline_s=deadline_s, task_id=task_id, on_task=on_task,
                                     environ=self.environ)
        except RemoteAgentError as exc:
            raise _failure(remote, exc.message) from None
        scrub = Redactor([self.environ.get(agent.secret_env, "")] if agent.secret_env else [])
        if outcome.state != "TASK_STATE_COMPLETED":
            said = scrub.text(outcome.status_text)[:500] or "no message"
            if outcome.state in INTERRUPTED:    # nobody here will answer it: not left waiting
                await cancel(agent, outcome.task_id, environ=self.environ)
                said += " (its task was cancelled)"
            raise _failure(remote, f"its task {outcome.task_id} ended {outcome.state}: {said}")
        answer = {"agent": agent.name, "skill": remote.skill, "task_id": outcome.task_id,
                  "result": scrub.value(outcome.result)}
        size = len(json.dumps(answer, ensure_ascii=False).encode())
        if size > self.result_max_bytes:
            raise _failure(remote, f"its result is {size} bytes, over the limit of {self.result_max_bytes}")
        return answer


def _failure(remote: RemoteSkill, reason: str) -> ProtocolError:
    return ProtocolError(ErrorCode.TOOL_FAILURE,
                         f"The remote agent '{remote.agent.name}' (skill '{remote.skill}') failed: {reason}.",
                         details={"agent": remote.agent.name, "skill": remote.skill})
