"""The Anthropic adapter against recorded Messages API exchanges (SSE streams in
fixtures/anthropic/), played to the official SDK through an httpx2 MockTransport."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from delegations.protocol.adapters.anthropic import AnthropicAdapter, to_anthropic_messages
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.tool_schemas import YIELD_CONTROL_TOOL

FIXTURES = Path(__file__).parent / "fixtures" / "anthropic"
SECRET = "sk-ant-api03-TESTSECRET-do-not-leak-0123456789"

YIELD_CONTROL = YIELD_CONTROL_TOOL  # as the hand-off protocol publishes it, quirks included
MESSAGES = [
    {"role": "system", "content": "You are a researcher subagent."},
    {"role": "user", "content": "Current price of TSLA"},
]
FAST = {"model": "claude-haiku-4-5", "retry_base_delay_s": 0.01}


def recorded(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    return SECRET


async def test_it_streams_text_deltas_and_reports_usage(provider_http) -> None:
    http = provider_http.play(provider_http.sse(recorded("text_stream.txt")))
    adapter = AnthropicAdapter(FAST, http_client=http.client())
    deltas: list[str] = []

    async def on_text(text: str) -> None:
        deltas.append(text)

    turn = await adapter.complete(MESSAGES, [], on_text=on_text)

    assert deltas == ["The price is ", "175.22 USD."]
    assert turn.text == "The price is 175.22 USD."
    assert turn.tool_calls == []
    assert (turn.input_tokens, turn.output_tokens) == (42, 9)
    assert turn.finish_reason == "stop"
    assert turn.model == "claude-haiku-4-5-20251001"
    headers = http.requests[0].headers
    assert SECRET in headers.get("x-api-key", "") + headers.get("authorization", "")
    assert http.body()["system"] == "You are a researcher subagent."
    assert http.body()["stream"] is True


async def test_it_joins_streamed_tool_input_into_one_tool_call(provider_http) -> None:
    http = provider_http.play(provider_http.sse(recorded("tool_use_stream.txt")))
    adapter = AnthropicAdapter(FAST, http_client=http.client())

    turn = await adapter.complete(MESSAGES, [YIELD_CONTROL])

    assert turn.text == "Returning the price to the parent."
    assert len(turn.tool_calls) == 1
    call = turn.tool_calls[0]
    assert (call.id, call.name) == ("toolu_01YieldPrice", "yield_control")
    assert call.arguments == {"status": "SUCCESS", "output_payload": {
        "price": 175.22, "currency": "USD", "timestamp": "2023-11-01T14:30:00Z"}}
    assert turn.finish_reason == "tool_calls"
    assert (turn.input_tokens, turn.output_tokens) == (512, 61)


def tool_use_stream(partial_json: str) -> str:
    """The recorded tool_use stream with the tool's input streamed as this one piece."""
    events = [event for event in recorded("tool_use_stream.txt").split("\n\n")
              if '"input_json_delta"' not in event]
    piece = "event: content_block_delta\ndata: " + json.dumps(
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": partial_json}})
    block_end = next(at for at, event in enumerate(events) if '"content_block_stop","index":1' in event)
    return "\n\n".join([*events[:block_end], piece, *events[block_end:]])


@pytest.mark.parametrize(("partial_json", "said"), [
    ('{"status": "SUCC', "not valid JSON"),
    ('["SUCCESS"]', "not a JSON object"),
])
async def test_it_reports_malformed_tool_input_as_err_tool_failure(
        provider_http, partial_json: str, said: str) -> None:
    http = provider_http.play(provider_http.sse(tool_use_stream(partial_json)))
    adapter = AnthropicAdapter(FAST, http_client=http.client())

    with pytest.raises(ProtocolError) as caught:
        await adapter.complete(MESSAGES, [YIELD_CONTROL])

    assert caught.value.code == ErrorCode.TOOL_FAILURE
    assert "yield_control" in caught.value.message and said in caught.value.message
    assert caught.value.details["tool"] == "yield_control"


async def test_it_sends_the_protocol_tool_as_a_standard_json_schema(provider_http) -> None:
    http = provider_http.play(provider_http.sse(recorded("tool_use_stream.txt")))
    adapter = AnthropicAdapter({**FAST, "tool_choice": "required"}, http_client=http.client())

    await adapter.complete(MESSAGES, [YIELD_CONTROL])

    tool = http.body()["tools"][0]
    assert tool["name"] == "yield_control"
    assert tool["input_schema"]["type"] == "object"
    assert tool["input_schema"]["required"] == ["status", "output_payload"]
    assert tool["input_schema"]["properties"]["error_report"]["type"] == ["object", "null"]
    assert http.body()["tool_choice"] == {"type": "any"}


async def test_it_retries_a_rate_limit_then_succeeds(provider_http) -> None:
    rate_limited = provider_http.json(
        429, {"type": "error", "error": {"type": "rate_limit_error",
                                         "message": "Number of requests has exceeded your rate limit"}})
    http = provider_http.play(rate_limited, provider_http.sse(recorded("text_stream.txt")))
    adapter = AnthropicAdapter(FAST, http_client=http.client())

    turn = await adapter.complete(MESSAGES, [])

    assert turn.text == "The price is 175.22 USD."
    assert len(http.requests) == 2


async def test_it_gives_up_on_an_overloaded_api_with_err_tool_failure(provider_http) -> None:
    overloaded = provider_http.json(
        529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    http = provider_http.play(overloaded)
    adapter = AnthropicAdapter({**FAST, "max_retries": 2}, http_client=http.client())

    with pytest.raises(ProtocolError) as caught:
        await adapter.complete(MESSAGES, [])

    assert caught.value.code == ErrorCode.TOOL_FAILURE
    assert "overloaded_error: Overloaded" in caught.value.message
    assert "529" in caught.value.message
    assert caught.value.details["tries"] == 3
    assert len(http.requests) == 3


async def test_it_retries_an_overloaded_error_event_inside_the_stream(provider_http) -> None:
    http = provider_http.play(provider_http.sse(recorded("overloaded_midstream.txt")),
                              provider_http.sse(recorded("text_stream.txt")))
    adapter = AnthropicAdapter(FAST, http_client=http.client())

    turn = await adapter.complete(MESSAGES, [])

    assert turn.text == "The price is 175.22 USD."
    assert len(http.requests) == 2


async def test_it_fails_a_server_error_after_its_retries(provider_http) -> None:
    http = provider_http.play(provider_http.json(
        500, {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}))
    adapter = AnthropicAdapter({**FAST, "max_retries": 1}, http_client=http.client())

    with pytest.raises(ProtocolError) as caught:
        await adapter.complete(MESSAGES, [])

    assert caught.value.code == ErrorCode.TOOL_FAILURE
    assert "Internal server error" in caught.value.message
    assert len(http.requests) == 2


async def test_it_does_not_retry_a_bad_request(provider_http) -> None:
    http = provider_http.play(provider_http.json(
        400, {"type": "error", "error": {"type": "invalid_request_error",
                                         "message": "messages: roles must alternate"}}))
    adapter = AnthropicAdapter(FAST, http_client=http.client())

    with pytest.raises(ProtocolError) as caught:
        await adapter.complete(MESSAGES, [])

    assert "roles must alternate" in caught.value.message
    assert len(http.requests) == 1


async def test_it_never_puts_the_api_key_in_an_error(provider_http) -> None:
    echoed = provider_http.json(
        401, {"type": "error", "error": {"type": "authentication_error",
                                         "message": f"invalid x-api-key: {SECRET}"}})
    http = provider_http.play(echoed)
    adapter = AnthropicAdapter(FAST, http_client=http.client())

    with pytest.raises(ProtocolError) as caught:
        await adapter.complete(MESSAGES, [])

    error = caught.value
    assert "authentication_error" in error.message
    for shown in (str(error), repr(error), str(error.as_dict())):
        assert SECRET not in shown
        assert "TESTSECRET" not in shown
    assert error.__cause__ is None and error.__suppress_context__


async def test_it_asks_for_the_key_when_none_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")

    with pytest.raises(ProtocolError) as caught:
        await AnthropicAdapter({"model": "claude-haiku-4-5"}).complete(MESSAGES, [])

    assert caught.value.code == ErrorCode.TOOL_FAILURE
    assert "ANTHROPIC_API_KEY" in caught.value.message


def test_it_merges_the_history_into_alternating_turns() -> None:
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Find the price."},
        {"role": "user", "content": "Use two sources."},
        {"role": "assistant", "content": "Reading.", "tool_calls": [
            {"id": "t1", "name": "read_file", "arguments": {"path": "a.txt"}},
            {"id": "t2", "name": "read_file", "arguments": {"path": "b.txt"}}]},
        {"role": "tool", "tool_call_id": "t1", "name": "read_file", "content": "175.22"},
        {"role": "tool", "tool_call_id": "t2", "name": "read_file", "content": {"ccy": "USD"}},
        {"role": "system", "content": "Budget: 80% used."},
    ]

    system, turns = to_anthropic_messages(history)

    assert system == "Be brief.\n\nBudget: 80% used."
    assert [turn["role"] for turn in turns] == ["user", "assistant", "user"]
    assert [block["text"] for block in turns[0]["content"]] == ["Find the price.",
                                                                "Use two sources."]
    assert turns[1]["content"][1] == {"type": "tool_use", "id": "t1", "name": "read_file",
                                      "input": {"path": "a.txt"}}
    assert [block["tool_use_id"] for block in turns[2]["content"]] == ["t1", "t2"]
    assert turns[2]["content"][1]["content"] == '{"ccy": "USD"}'


def test_it_opens_with_a_user_turn_when_the_history_does_not() -> None:
    _, turns = to_anthropic_messages([{"role": "assistant", "content": "Hello."}])

    assert [turn["role"] for turn in turns] == ["user", "assistant"]


@pytest.mark.parametrize(("config", "key"), [
    ({"model": 7}, "model"),
    ({"model": "claude-haiku-4-5", "api_key": SECRET}, "api_key"),
    ({"model": "claude-haiku-4-5", "endpoint": "openai"}, "endpoint"),
    ({"model": "claude-haiku-4-5", "api_key_env": "DATABASE_URL"}, "api_key_env"),
    ({"model": "claude-haiku-4-5", "max_tokens": 0}, "max_tokens"),
    ({"model": "claude-haiku-4-5", "temperature": 1.5}, "temperature"),
    ({"model": "claude-haiku-4-5", "base_url": "https://api.anthropic.com"}, "base_url"),
    ({"model": "claude-haiku-4-5", "max_retries": -1}, "max_retries"),
    ({"model": "claude-haiku-4-5", "temprature": 0.2}, "temprature"),
])
def test_it_rejects_a_bad_config_naming_the_key(config: dict, key: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        AnthropicAdapter(config)

    assert caught.value.code == ErrorCode.INVALID_ADAPTER_CONFIG
    assert caught.value.details["key"] == key
    assert SECRET not in caught.value.message


def test_its_public_config_and_children_keep_the_settings() -> None:
    adapter = AnthropicAdapter({"model": "claude-haiku-4-5", "max_tokens": 256})
    child = adapter.for_child("pricer")

    assert isinstance(child, AnthropicAdapter)
    assert child.public_config() == {"endpoint": "anthropic", "model": "claude-haiku-4-5",
                                     "max_tokens": 256}
    assert child.model_name == "claude-haiku-4-5"


async def test_it_sends_temperature_as_a_body_field(provider_http) -> None:
    http = provider_http.play(provider_http.sse(recorded("text_stream.txt")))
    adapter = AnthropicAdapter({**FAST, "temperature": 0.3, "max_tokens": 300},
                               http_client=http.client())

    await adapter.complete(MESSAGES, [])

    assert http.body()["temperature"] == 0.3
    assert http.body()["max_tokens"] == 300


async def test_a_forced_tool_choice_names_the_tool(provider_http) -> None:
    http = provider_http.play(provider_http.sse(recorded("tool_use_stream.txt")))
    adapter = AnthropicAdapter(FAST, http_client=http.client())

    turn = await adapter.complete(MESSAGES, [YIELD_CONTROL], tool_choice="yield_control")

    assert turn.tool_calls[0].name == "yield_control"
    assert http.body()["tool_choice"] == {"type": "tool", "name": "yield_control"}
