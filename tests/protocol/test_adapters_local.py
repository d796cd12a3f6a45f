"""The local adapter: a small GGUF model (Gemma 3 270M by default, or SmolLM2-135M-Instruct)
run by llama-cpp-python, with answers constrained to valid tool calls."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from delegations.protocol.adapters import local
from delegations.protocol.adapters.local import (
    LocalAdapter,
    answer_schema,
    bounded_schema,
    close_truncated_json,
    llama_cpp_missing,
    tools_prompt,
)
from delegations.protocol.adapters.local_host import model_host
from delegations.protocol.adapters.local_models import DEFAULT_LOCAL_MODEL
from delegations.protocol.adapters.model_host import (
    RepeatedKeyGuard,
    fit_to_context,
    fold_system_into_user,
)
from delegations.protocol.adapters.tool_format import parameters_schema
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.tool_schemas import (
    DELEGATE_TASK_TOOL,
    MODEL_TOOLS,
    YIELD_CONTROL_TOOL,
    yield_control_for,
)

from .conftest import local_model_or_skip

DELEGATE_TASK = DELEGATE_TASK_TOOL  # the hand-off protocol's, verbatim
YIELD_CONTROL = YIELD_CONTROL_TOOL  # the hand-off protocol's, verbatim, quirks included
TOOLS = [YIELD_CONTROL, DELEGATE_TASK]
MESSAGES = [
    {"role": "system", "content": "You are a researcher subagent. Finish with yield_control."},
    {"role": "user", "content": 'Task: report the price of TSLA. Data: {"price": 175.22, '
                                '"currency": "USD"}'},
]


@pytest.mark.local_model
async def test_it_answers_with_a_tool_call_that_is_valid_for_the_tool(gguf: Path) -> None:
    adapter = LocalAdapter({"temperature": 0.2, "seed": 7, "max_tokens": 300})

    turn = await adapter.complete(MESSAGES, TOOLS)

    assert turn.text == ""
    assert turn.finish_reason == "tool_calls"
    assert len(turn.tool_calls) == 1
    call = turn.tool_calls[0]
    assert call.id.startswith("call_")
    tool = next(t for t in TOOLS if t["name"] == call.name)
    jsonschema.validate(call.arguments, parameters_schema(tool))
    assert turn.input_tokens > 50
    assert turn.output_tokens > 0
    assert turn.model == f"local/{DEFAULT_LOCAL_MODEL}"


@pytest.mark.local_model
async def test_it_streams_the_tool_call_json_as_it_is_written(gguf: Path) -> None:
    adapter = LocalAdapter({"seed": 11, "max_tokens": 300})
    deltas: list[str] = []

    async def on_text(text: str) -> None:
        deltas.append(text)

    turn = await adapter.complete(MESSAGES, [YIELD_CONTROL], on_text=on_text)

    assert len(deltas) > 5
    # What watchers saw is the call itself (closed after its last complete member when the
    # model was stopped mid-object).
    written = close_truncated_json("".join(deltas))
    assert written == {"name": turn.tool_calls[0].name, "arguments": turn.tool_calls[0].arguments}
    assert written["name"] == "yield_control"
    assert written["arguments"]["status"] in ("SUCCESS", "FAILURE", "PARTIAL_COMPLETION")


@pytest.mark.local_model
async def test_it_calls_the_tools_the_runner_offers(gguf: Path) -> None:
    tools = [MODEL_TOOLS["yield_control"], MODEL_TOOLS["request_capability"]]
    adapter = LocalAdapter({"seed": 2, "max_tokens": 200})

    turn = await adapter.complete(MESSAGES, tools)

    call = turn.tool_calls[0]
    tool = next(t for t in tools if t["name"] == call.name)
    jsonschema.validate(call.arguments, tool["parameters"])


@pytest.mark.local_model
async def test_a_forced_tool_choice_constrains_the_answer_to_that_tool(gguf: Path) -> None:
    tools = [MODEL_TOOLS["request_capability"], MODEL_TOOLS["yield_control"]]
    adapter = LocalAdapter({"seed": 5, "max_tokens": 200})

    turn = await adapter.complete(MESSAGES, tools, tool_choice="yield_control")

    call = turn.tool_calls[0]
    assert call.name == "yield_control"
    jsonschema.validate(call.arguments, MODEL_TOOLS["yield_control"]["parameters"])


@pytest.mark.local_model
async def test_it_writes_plain_text_when_no_tools_are_offered(gguf: Path) -> None:
    adapter = LocalAdapter({"seed": 3, "max_tokens": 24})

    turn = await adapter.complete([{"role": "user", "content": "Say hello."}], [])

    assert turn.text.strip()
    assert turn.tool_calls == []
    assert 0 < turn.output_tokens <= 24


@pytest.mark.local_model
async def test_cancelling_the_call_stops_generation_within_a_second(gguf: Path) -> None:
    adapter = LocalAdapter({"max_tokens": 2000, "temperature": 0.8})
    first_delta = asyncio.Event()

    async def on_text(text: str) -> None:
        first_delta.set()

    prompt = [{"role": "user", "content": "Write a very long story about a lighthouse."}]
    task = asyncio.create_task(adapter.complete(prompt, [], on_text=on_text))
    await asyncio.wait_for(first_delta.wait(), timeout=60)
    cancelled_at = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    host_pid = model_host().pid
    assert host_pid is not None
    assert time.monotonic() - cancelled_at < 1.5
    # The model is free again: the next call is not stuck behind the cancelled one, and
    # the host answered the cancel (it was not killed as hung).
    turn = await asyncio.wait_for(
        LocalAdapter({"max_tokens": 8}).complete([{"role": "user", "content": "Hi"}], []),
        timeout=30)
    assert turn.output_tokens > 0
    assert model_host().pid == host_pid


async def test_a_missing_model_file_says_what_to_do() -> None:
    adapter = LocalAdapter({"model_path": "/nonexistent/models/smollm2.gguf"})

    with pytest.raises(ProtocolError) as caught:
        await adapter.complete(MESSAGES, TOOLS)

    assert caught.value.code == ErrorCode.TOOL_FAILURE
    message = caught.value.message
    if llama_cpp_missing() is None:
        assert "/nonexistent/models/smollm2.gguf does not exist" in message
        assert "model_path" in message
        assert "smollm2-135m, gemma3-270m" in message
    else:
        assert "pip install 'llama-cpp-python" in message


def test_an_unknown_model_is_a_config_error_listing_the_shipped_ones() -> None:
    with pytest.raises(ProtocolError) as caught:
        LocalAdapter({"model": "llama-70b"})

    assert caught.value.code == ErrorCode.INVALID_ADAPTER_CONFIG
    assert caught.value.details["key"] == "model"
    assert "smollm2-135m, gemma3-270m" in caught.value.message


def test_it_names_its_model_by_catalog_name_or_by_file() -> None:
    assert LocalAdapter({}).model_name == f"local/{DEFAULT_LOCAL_MODEL}"
    assert LocalAdapter({"model": "gemma3-270m"}).model_name == "local/gemma3-270m"
    assert LocalAdapter({"model_path": "~/models/mine.Q8_0.gguf"}).model_name == "local/mine.Q8_0"


async def test_a_model_path_wins_over_the_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    def locate(name: str) -> Path:
        raise AssertionError(f"the catalog was asked for {name}")

    monkeypatch.setattr(local, "locate", locate)
    adapter = LocalAdapter({"model": "gemma3-270m", "model_path": "/nonexistent/own.gguf"})

    with pytest.raises(ProtocolError) as caught:
        await adapter.load()

    assert adapter.model_name == "local/own"
    assert caught.value.code == ErrorCode.TOOL_FAILURE
    if llama_cpp_missing() is None:
        assert caught.value.details == {"model_path": "/nonexistent/own.gguf"}


async def test_it_finds_and_checks_the_model_file_off_the_event_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def locate(name: str) -> Path:
        seen.append(threading.current_thread().name)
        raise ProtocolError(ErrorCode.TOOL_FAILURE, f"The local model '{name}' is not installed")

    monkeypatch.setattr(local, "locate", locate)
    monkeypatch.setattr(local, "llama_cpp_missing", lambda: None)

    with pytest.raises(ProtocolError, match="'gemma3-270m' is not installed"):
        await LocalAdapter({"model": "gemma3-270m"}).complete(MESSAGES, TOOLS)

    assert len(seen) == 1 and seen[0] != threading.current_thread().name


def test_system_text_opens_the_first_user_message_for_a_model_without_a_system_role() -> None:
    chat = [{"role": "system", "content": "rules"}, {"role": "user", "content": "task"},
            {"role": "assistant", "content": "{}"}, {"role": "system", "content": "late note"},
            {"role": "assistant", "content": "{}"}, {"role": "system", "content": "last"}]

    assert fold_system_into_user(chat) == [
        {"role": "user", "content": "rules\n\ntask"}, {"role": "assistant", "content": "{}"},
        {"role": "user", "content": "late note"}, {"role": "assistant", "content": "{}"},
        {"role": "user", "content": "last"}]


@pytest.mark.local_model
async def test_gemma3_answers_with_a_valid_tool_call() -> None:
    local_model_or_skip("gemma3-270m")
    adapter = LocalAdapter({"model": "gemma3-270m", "seed": 7, "max_tokens": 300})

    turn = await adapter.complete(MESSAGES, TOOLS)

    assert turn.model == "local/gemma3-270m"
    assert turn.finish_reason == "tool_calls"
    call = turn.tool_calls[0]
    tool = next(t for t in TOOLS if t["name"] == call.name)
    jsonschema.validate(call.arguments, parameters_schema(tool))
    assert turn.input_tokens > 50


@pytest.mark.parametrize(("config", "key"), [
    ({"model_path": "/models/smollm2.bin"}, "model_path"),
    ({"n_ctx": 100}, "n_ctx"),
    ({"temperature": -1}, "temperature"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"n_ctx": 1024, "max_tokens": 1024}, "max_tokens"),
    ({"seed": "seven"}, "seed"),
    ({"n_threads": 0}, "n_threads"),
    ({"model": "gpt-4o"}, "model"),
])
def test_it_rejects_a_bad_config_naming_the_key(config: dict, key: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        LocalAdapter(config)

    assert caught.value.code == ErrorCode.INVALID_ADAPTER_CONFIG
    assert caught.value.details["key"] == key


def test_its_answer_schema_allows_exactly_one_call_of_an_offered_tool() -> None:
    schema = answer_schema(TOOLS)
    good = {"name": "yield_control",
            "arguments": {"status": "SUCCESS", "output_payload": {"price": 175.22}}}

    jsonschema.validate(good, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "rm_rf", "arguments": {}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "yield_control", "arguments": {"status": "DONE",
                                                                    "output_payload": {}}}, schema)


def test_its_tool_note_is_one_short_line_per_tool() -> None:
    note = tools_prompt(TOOLS)

    assert note.count("\n") == len(TOOLS)
    assert "- yield_control(status, output_payload, error_report?): Terminates subagent session" in note
    assert "log_summary" not in note   # optional prose a small model is not asked to write
    assert len(note) < 400


def test_the_answer_schema_leaves_out_the_log_summary_and_the_clarifying_question() -> None:
    [yield_tool] = [tool for tool in TOOLS if tool["name"] == "yield_control"]
    result, failure = answer_schema([yield_tool])["properties"]["arguments"]["anyOf"]
    assert "log_summary" not in result["properties"] | failure["properties"]
    assert result["properties"]["status"] == {"enum": ["SUCCESS", "PARTIAL_COMPLETION"]}
    assert failure["required"] == ["status", "output_payload", "error_report"]


def test_it_closes_a_cut_off_answer_after_its_last_complete_member() -> None:
    cut = '{"name": "yield_control", "arguments": {"status": "SUCCESS", "output_payload": {"a": 1, "b": "tw'

    assert close_truncated_json(cut) == {"name": "yield_control", "arguments": {
        "status": "SUCCESS", "output_payload": {"a": 1}}}
    assert close_truncated_json('{"a": [1, 2') == {"a": [1]}
    assert close_truncated_json('{"a": "x\\"y", "b') == {"a": 'x"y'}
    assert close_truncated_json("") is None


def test_its_guard_stops_at_the_first_repeated_key_of_an_object() -> None:
    guard = RepeatedKeyGuard()
    text = '{"name": "y", "arguments": {"output_payload": {"type": "json", "data": {"type": 1}, '

    assert guard.feed(text) is False  # "type" again, but inside another object
    assert guard.feed('"data"') is True


def test_its_grammar_schema_is_a_bounded_subset_of_the_tool_schema() -> None:
    schema = bounded_schema(parameters_schema(YIELD_CONTROL))
    payload = schema["properties"]["output_payload"]

    assert payload["additionalProperties"]["anyOf"][0] == {"type": "string", "maxLength": 200}
    assert schema["properties"]["status"]["enum"] == ["SUCCESS", "FAILURE", "PARTIAL_COMPLETION"]
    assert schema["properties"]["log_summary"]["maxLength"] == 200
    jsonschema.validate({"status": "SUCCESS", "output_payload": {"price": 1.5}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"status": "SUCCESS", "output_payload": {"nested": {"a": 1}}}, schema)


def test_its_grammar_keeps_a_runs_expected_output_schema_and_the_empty_payload() -> None:
    expected = {"type": "object", "properties": {"answer": {"type": "integer"}},
                "required": ["answer"]}
    arguments = answer_schema([yield_control_for(expected)])["properties"]["arguments"]

    jsonschema.validate({"status": "SUCCESS", "output_payload": {"answer": 42}}, arguments)
    jsonschema.validate({"status": "FAILURE", "output_payload": {},
                         "error_report": {"code": "ERR_TOOL_FAILURE", "message": "no source"}},
                        arguments)
    for wrong in ({"status": "SUCCESS", "output_payload": {"answer": "forty-two"}},
                  {"status": "SUCCESS", "output_payload": {"data": 42}},
                  {"status": "SUCCESS", "output_payload": {}},          # a result has a payload
                  {"status": "FAILURE", "output_payload": {}},          # a failure says why
                  {"status": "SUCCESS", "output_payload": {"answer": 1},
                   "error_report": {"code": "ERR_X", "message": "m"}}):  # and only a failure
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, arguments)


def test_it_drops_the_oldest_turns_to_fit_the_context() -> None:
    chat = [{"role": "system", "content": "rules"}, {"role": "user", "content": "task"}]
    chat += [{"role": "user", "content": f"old turn {i} " + "x" * 400} for i in range(10)]
    chat += [{"role": "user", "content": "latest"}]

    def count(text: str) -> int:
        return len(text) // 4

    fitted = fit_to_context(chat, count, budget=300)

    assert fitted[:2] == chat[:2]
    assert fitted[-1] == {"role": "user", "content": "latest"}
    assert sum(count(m["content"]) + 4 for m in fitted) <= 300
    assert len(fitted) < len(chat)


def test_its_public_config_shows_every_setting() -> None:
    adapter = LocalAdapter({"max_tokens": 128, "seed": 1})

    assert adapter.public_config() == {"max_tokens": 128, "seed": 1}
    assert isinstance(adapter.for_child("helper"), LocalAdapter)
