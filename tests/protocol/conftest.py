"""Shared fixtures for the protocol tests (each helper appends its own section)."""

from __future__ import annotations

import json as _json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest

# --- H5: scripted HTTP for the OpenAI and Anthropic SDKs -----------------------------------
# The official SDKs speak through httpx2 (not httpx), so respx cannot see their traffic; a
# MockTransport handed to the SDK as its http_client plays recorded responses instead.

@dataclass
class ScriptedHTTP:
    """Plays ``responses`` in order (the last one repeats) and keeps every request seen."""

    responses: list[httpx2.Response]
    requests: list[httpx2.Request] = field(default_factory=list)

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        index = min(len(self.requests), len(self.responses)) - 1
        return self.responses[index]

    def client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self._handle))

    def body(self, index: int = -1) -> dict[str, Any]:
        return dict(_json.loads(self.requests[index].content))


class ProviderHTTP:
    """Builds recorded provider responses and the scripted client that plays them."""

    @staticmethod
    def sse(body: str, status: int = 200) -> httpx2.Response:
        return httpx2.Response(status, headers={"content-type": "text/event-stream"},
                               content=body.encode())

    @staticmethod
    def json(status: int, payload: dict[str, Any],
             headers: dict[str, str] | None = None) -> httpx2.Response:
        return httpx2.Response(status,
                               headers={"content-type": "application/json", **(headers or {})},
                               content=_json.dumps(payload).encode())

    @staticmethod
    def broken_sse(first: str = "") -> httpx2.Response:
        """An event stream whose connection drops after ``first`` (like a server crashing)."""

        class DroppedStream(httpx2.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                if first:
                    yield first.encode()
                raise httpx2.RemoteProtocolError("peer closed connection without sending "
                                                 "complete message body")

        return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                               stream=DroppedStream())

    @staticmethod
    def play(*responses: httpx2.Response) -> ScriptedHTTP:
        return ScriptedHTTP(list(responses))


@pytest.fixture
def provider_http() -> ProviderHTTP:
    return ProviderHTTP()


# --- H4: the runner and the scripted adapter -------------------------------------------------
# Builders for scripted turns and packets, and the runner wired to in-memory sink/store.

from pathlib import Path as _Path  # noqa: E402

from delegations.protocol.approvals import (  # noqa: E402
    ApprovalDecision,
    ApprovalRequest,
    AutoGate,
    Decision,
    RunParked,
)
from delegations.protocol.checkpoints import MemoryCheckpointStore  # noqa: E402
from delegations.protocol.events import MemorySink  # noqa: E402


def yield_turn(payload: dict[str, Any] | None = None, status: str = "SUCCESS",
               **extra: Any) -> dict[str, Any]:
    """A scripted turn that hands back a result through yield_control."""
    arguments = {"status": status, "output_payload": payload if payload is not None else {"answer": 42},
                 **extra}
    return {"tool_calls": [{"name": "yield_control", "arguments": arguments}]}


def busy_turn(input_tokens: int = 0, **extra: Any) -> dict[str, Any]:
    """A turn that does some work (a tool call) without finishing the run."""
    return {"tool_calls": [{"name": "list_files", "arguments": {}}],
            "usage": {"input_tokens": input_tokens, "output_tokens": 0}, **extra}


def call_turn(name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}], **extra}


def delegate_args(label: str, **extra: Any) -> dict[str, Any]:
    return {"subagent_type": "researcher", "label": label,
            "instruction_set": "Look the answer up and hand it back with yield_control.",
            "input_data": {"question": "What is six times seven?"}, **extra}


def root_packet(**fields: Any) -> dict[str, Any]:
    """A well-formed root contract (every delegation contract part present, so lint
    has no errors)."""
    packet: dict[str, Any] = {
        "goal": "Answer the question and hand back the answer",
        "instruction_set": "You coordinate subagents.",
        "subagent_type": "researcher",
        "input_data": {"question": "What is six times seven?"},
        "timeout_s": 30,
        "budget": {"max_model_calls": 50, "max_tokens": 100000},
        "success_criteria": [],
    }
    packet.update(fields)
    return packet


class ParkingGate:
    """Parks every question it has no decision for; ``decide_key`` fills decisions in."""

    def __init__(self) -> None:
        self.decisions: dict[str, ApprovalDecision] = {}
        self.asked: list[ApprovalRequest] = []

    def decide_key(self, key: str, decision: ApprovalDecision) -> None:
        self.decisions[key] = decision

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        if request.key in self.decisions:
            return self.decisions[request.key]
        raise RunParked(request)


@pytest.fixture
def sink() -> Iterator[MemorySink]:
    """An in-memory sink that checks, once the test is done, the runner's promise: every
    run that ended (a ``result`` event) hands back a result, unless it was REJECTED."""
    recorded = MemorySink()
    yield recorded
    silent = [(event.run_id, event.data.get("state")) for event in recorded.of_type("result")
              if event.data.get("result") is None and event.data.get("state") != "REJECTED"]
    assert not silent, f"runs ended with no result: {silent}"


@pytest.fixture
def store() -> MemoryCheckpointStore:
    return MemoryCheckpointStore()


@pytest.fixture
def gate() -> AutoGate:
    return AutoGate()


@pytest.fixture
def workspace(tmp_path: _Path) -> _Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def settings(tmp_path: _Path) -> Any:
    from delegations.protocol.runner import RunnerSettings

    return RunnerSettings(token_key=b"test-key-0123456789", workspace_root=tmp_path / "runs")


@pytest.fixture
def runner(sink: MemorySink, gate: AutoGate, store: MemoryCheckpointStore, settings: Any) -> Any:
    from delegations.protocol.runner import Runner

    return Runner(sink=sink, gate=gate, checkpoints=store, settings=settings)


# --- H4 (issue #4): the real local model ---------------------------------------------------

def local_model_or_skip(model: str = "smollm2-135m", *, server: bool = False) -> _Path:
    """The verified GGUF of the catalog model ``model`` (and, with ``server``,
    llama-cpp-python's [server] extra); skips when something is missing, and fails instead
    when HANDOFF_REQUIRE_SERVICES=1 (CI must not skip the real model silently). Gemma is
    assembled into the model cache on first use (HANDOFF_MODEL_CACHE). SmolLM2 by default:
    the ``llama_server`` fixture serves it with a ChatML format."""
    import os

    from delegations.protocol.adapters.local import llama_cpp_missing
    from delegations.protocol.adapters.local_models import SHIPPED_MODELS, installed, locate

    problem = llama_cpp_missing()
    if problem is None and not installed(model):
        problem = f"the {SHIPPED_MODELS[model].package} package (which ships the GGUF) is not installed"
    if problem is None and server:
        try:
            import llama_cpp.server  # noqa: F401
        except ImportError:
            problem = "llama-cpp-python's [server] extra is not installed"
    if problem is not None:
        if os.environ.get("HANDOFF_REQUIRE_SERVICES") == "1":
            pytest.fail(f"HANDOFF_REQUIRE_SERVICES=1 but {problem}")
        pytest.skip(problem)
    return locate(model)


@pytest.fixture(scope="module")
def gguf() -> _Path:
    """The local adapter's default model."""
    from delegations.protocol.adapters.local_models import DEFAULT_LOCAL_MODEL

    return local_model_or_skip(DEFAULT_LOCAL_MODEL)


__all__ = ["ApprovalDecision", "Decision", "ParkingGate", "busy_turn", "call_turn", "delegate_args",
           "local_model_or_skip", "root_packet", "yield_turn"]
