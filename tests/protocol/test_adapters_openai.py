"""The OpenAI adapter: against a real OpenAI-compatible server (llama.cpp's, serving the
SmolLM2 GGUF on 127.0.0.1) and against recorded responses for the failure paths."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from delegations.protocol.adapters import openai as openai_adapter
from delegations.protocol.adapters.endpoints import ModelEndpoint
from delegations.protocol.adapters.openai import OpenAIAdapter, to_openai_messages
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.tool_schemas import YIELD_CONTROL_TOOL

from .conftest import local_model_or_skip

SECRET = "sk-proj-TESTSECRET-do-not-leak-0123456789"
MESSAGES = [
    {"role": "system", "content": "You are a researcher subagent."},
    {"role": "user", "content": "Current price of TSLA"},
]
YIELD_CONTROL = YIELD_CONTROL_TOOL  # as the hand-off protocol publishes it, quirks included
FAST = {"model": "gpt-4o-mini", "retry_base_delay_s": 0.01}


def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> str:
    body: dict = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                  "model": "gpt-4o-mini-2024-07-18",
                  "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        body["choices"] = []
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n"


TEXT_STREAM = (chunk({"role": "assistant", "content": ""}) + chunk({"content": "The price "})
               + chunk({"content": "is 175.22 USD."}) + chunk({}, "stop")
               + chunk({}, usage={"prompt_tokens": 31, "completion_tokens": 8,
                                  "total_tokens": 39})
               + "data: [DONE]\n\n")


def tool_stream(*fragments: str, name: str = "yield_control") -> str:
    first = chunk({"role": "assistant", "content": None, "tool_calls": [
        {"index": 0, "id": "call_abc", "type": "function",
         "function": {"name": name, "arguments": ""}}]})
    rest = "".join(chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
                   for part in fragments)
    return first + rest + chunk({}, "tool_calls") + "data: [DONE]\n\n"


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    # Each test meets its servers fresh (the adapter remembers servers that cannot stream).
    monkeypatch.setattr(openai_adapter, "_NO_TOOL_STREAMING", set())
    return SECRET


# --- recorded responses ---------------------------------------------------------------------

async def test_it_streams_text_and_reads_usage_from_the_last_chunk(provider_http) -> None:
    http = provider_http.play(provider_http.sse(TEXT_STREAM))
    adapter = OpenAIAdapter(FAST, http_client=http.client())
    deltas: list[str] = []

    async def on_text(text: str) -> None:
        deltas.append(text)

    turn = await adapter.complete(MESSAGES, [], on_text=on_text)

    assert deltas == ["The price ", "is 175.22 USD."]
    assert turn.text == "The price is 175.22 USD."
    assert (turn.input_tokens, turn.output_tokens) == (31, 8)
    assert turn.model == "gpt-4o-mini-2024-07-18"
    assert http.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    body = http.body()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert "tools" not in body


async def test_it_joins_tool_call_fragments_by_index(provider_http) -> None:
    stream = tool_stream('{"status": "SUC', 'CESS", "output_payload": ',
                         '{"price": 175.22, "currency": "USD"}}')
    http = provider_http.play(provider_http.sse(stream))
    adapter = OpenAIAdapter(FAST, http_client=http.client())

    turn = await adapter.complete(MESSAGES, [YIELD_CONTROL])

    assert [(c.id, c.name) for c in turn.tool_calls] == [("call_abc", "yield_control")]
    assert turn.tool_calls[0].arguments == {"status": "SUCCESS", "output_payload": {
        "price": 175.22, "currency": "USD"}}
    assert turn.finish_reason == "tool_calls"
    assert turn.input_tokens > 0  # no usage chunk: estimated, so budgets still count it
    tool = http.body()["tools"][0]
    assert tool["type"] == "function"
    assert tool["function"]["parameters"]["type"] == "object"
    assert tool["function"]["parameters"]["required"] == ["status", "output_payload"]
    assert http.body()["tool_choice"] == "auto"


async def test_it_retries_a_rate_limit_then_succeeds(provider_http) -> None:
    limited = provider_http.json(429, {"error": {"message": "Rate limit reached for gpt-4o-mini",
                                                 "type": "requests", "code": "rate_limit_exceeded"}})
    http = provider_http.play(limited, provider_http.sse(TEXT_STREAM))
    adapter = OpenAIAdapter(FAST, http_client=http.client())

    turn = await adapter.complete(MESSAGES, [])

    assert turn.text == "The price is 175.22 USD."
    assert len(http.requests) == 2


async def test_it_fails_with_err_tool_failure_when_server_errors_outlast_the_retries(
        provider_http) -> None:
    http = provider_http.play(provider_http.json(
        500, {"error": {"message": "The server had an error while processing your request.",
                        "type": "server_error"}}))
    adapter = OpenAIAdapter({**FAST, "max_retries": 2}, http_client=http.client())

    with pytest.raises(ProtocolError) as caught:
        await adapter.complete(MESSAGES, [])

    assert caught.value.code == ErrorCode.TOOL_FAILURE
    assert "HTTP 500" in caught.value.message
    assert "The server had an error" in caught.value.message
    assert caught.value.details["tries"] == 3
    assert len(http.requests) == 3


async def test_a_stream_dropped_after_text_fails_without_replaying_it(provider_http) -> None:
    http = provider_http.play(provider_http.broken_sse(chunk({"content": "The price "})))
    adapter = OpenAIAdapter(FAST, http_client=http.client())
    deltas: list[str] = []

    async def on_text(text: str) -> None:
        deltas.append(text)

    with pytest.raises(ProtocolError) as caught:
        await adapter.complete(MESSAGES, [YIELD_CONTROL], on_text=on_text)

    assert caught.value.code == ErrorCode.TOOL_FAILURE
    assert deltas == ["The price "]
    assert len(http.requests) == 1


async def test_it_does_not_retry_a_bad_request(provider_http) -> None:
    http = provider_http.play(provider_http.json(
        400, {"error": {"message": "Invalid schema for function 'yield_control'",
                        "type": "invalid_request_error"}}))
    adapter = OpenAIAdapter(FAST, http_client=http.client())

    with pytest.raises(ProtocolError) as caught:
        await adapter.complete(MESSAGES, [YIELD_CONTROL])

    assert "Invalid schema for function 'yield_control'" in caught.value.message
    assert len(http.requests) == 1


async def test_it_reports_malformed_tool_arguments_as_err_tool_failure(provider_http) -> None:
    http = provider_http.play(provider_http.sse(tool_stream('{"status": "SUCCESS", "output_')))
    adapter = OpenAIAdapter(FAST, http_client=http.client())

    with pytest.raises(ProtocolError) as caught:
        await adapter.complete(MESSAGES, [YIELD_CONTROL])

    assert caught.value.code == ErrorCode.TOOL_FAILURE
    assert "yield_control" in caught.value.message
    assert "not valid JSON" in caught.value.message


async def test_it_never_puts_the_api_key_in_an_error(provider_http) -> None:
    http = provider_http.play(provider_http.json(
        401, {"error": {"message": f"Incorrect API key provided: {SECRET}. You can find your "
                                   "API key at https://platform.openai.com/account/api-keys.",
                        "type": "invalid_request_error", "code": "invalid_api_key"}}))
    adapter = OpenAIAdapter(FAST, http_client=http.client())

    with pytest.raises(ProtocolError) as caught:
        await adapter.complete(MESSAGES, [])

    error = caught.value
    assert "Incorrect API key provided" in error.message
    for shown in (str(error), repr(error), json.dumps(error.as_dict())):
        assert SECRET not in shown
        assert "TESTSECRET" not in shown
    assert error.__cause__ is None and error.__suppress_context__


async def test_it_asks_for_the_key_when_none_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")

    with pytest.raises(ProtocolError) as caught:
        await OpenAIAdapter({"model": "gpt-4o-mini"}).complete(MESSAGES, [])

    assert caught.value.code == ErrorCode.TOOL_FAILURE
    assert "OPENAI_API_KEY" in caught.value.message


async def test_a_local_server_needs_no_key(monkeypatch: pytest.MonkeyPatch, provider_http) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    http = provider_http.play(provider_http.sse(TEXT_STREAM))
    local = ModelEndpoint("local-server", "openai", "http://127.0.0.1:9/v1", "OPENAI_API_KEY")
    adapter = OpenAIAdapter(FAST, endpoint=local, http_client=http.client())

    turn = await adapter.complete(MESSAGES, [])

    assert turn.text == "The price is 175.22 USD."
    assert str(http.requests[0].url) == "http://127.0.0.1:9/v1/chat/completions"
    assert http.requests[0].headers["authorization"] == "Bearer not-needed"


async def test_it_sends_the_key_the_endpoint_names_to_the_endpoint_only(
        monkeypatch: pytest.MonkeyPatch, provider_http) -> None:
    monkeypatch.setenv("VLLM_TEST_KEY", "vllm-key-0123456789")
    http = provider_http.play(provider_http.sse(TEXT_STREAM))
    vllm = ModelEndpoint("vllm", "openai", "http://127.0.0.1:9/v1", "VLLM_TEST_KEY", ("qwen",))
    adapter = OpenAIAdapter({"seed": 7}, endpoint=vllm, http_client=http.client())

    await adapter.complete(MESSAGES, [])

    request = http.requests[0]
    assert str(request.url) == "http://127.0.0.1:9/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer vllm-key-0123456789"
    assert (http.body()["model"], http.body()["seed"]) == ("qwen", 7)
    assert adapter.public_config() == {"endpoint": "vllm", "model": "qwen", "seed": 7}


async def test_it_names_the_tool_when_one_tool_is_required(provider_http) -> None:
    http = provider_http.play(provider_http.sse(tool_stream('{"status": "SUCCESS", '
                                                            '"output_payload": {}}')))
    adapter = OpenAIAdapter({**FAST, "tool_choice": "required", "temperature": 0,
                             "max_tokens": 64}, http_client=http.client())

    await adapter.complete(MESSAGES, [YIELD_CONTROL])

    body = http.body()
    assert body["tool_choice"] == {"type": "function", "function": {"name": "yield_control"}}
    assert (body["temperature"], body["max_tokens"]) == (0, 64)


@pytest.mark.parametrize("stream_ends", ["cleanly", "with a dropped connection"])
async def test_it_asks_again_unstreamed_when_a_stream_with_tools_ends_empty(
        provider_http, stream_ends: str) -> None:
    empty_stream = (provider_http.sse("") if stream_ends == "cleanly"
                    else provider_http.broken_sse())
    answer = provider_http.json(200, {
        "id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": "smollm2",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function", "function": {
                    "name": "yield_control",
                    "arguments": '{"status": "SUCCESS", "output_payload": {}}'}}]}}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}})
    http = provider_http.play(empty_stream, answer)
    adapter = OpenAIAdapter(FAST, http_client=http.client())

    turn = await adapter.complete(MESSAGES, [YIELD_CONTROL])

    assert [(c.name, c.arguments["status"]) for c in turn.tool_calls] == [
        ("yield_control", "SUCCESS")]
    assert (turn.input_tokens, turn.output_tokens) == (40, 12)
    assert http.body(0)["stream"] is True
    assert "stream" not in http.body(1)
    # Learned: the next call with tools to this server is not streamed at all.
    await adapter.complete(MESSAGES, [YIELD_CONTROL])
    assert len(http.requests) == 3 and "stream" not in http.body(2)


def test_it_converts_the_history_to_chat_completions_form() -> None:
    history = [
        {"role": "user", "content": "Read a.txt"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "name": "read_file", "arguments": {"path": "a.txt"}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "read_file",
         "content": {"text": "175.22"}},
    ]

    converted = to_openai_messages(history)

    assert converted[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}}]}
    assert converted[2] == {"role": "tool", "tool_call_id": "call_1",
                            "content": '{"text": "175.22"}'}


@pytest.mark.parametrize(("config", "key"), [
    ({"model": 7}, "model"),
    ({"model": "gpt-4o-mini", "api_key": SECRET}, "api_key"),
    ({"model": "gpt-4o-mini", "endpoint": "nowhere"}, "endpoint"),
    ({"model": "gpt-4o-mini", "endpoint": "anthropic"}, "endpoint"),
    ({"model": "gpt-4o-mini", "default_headers": {"X-Api-Key": SECRET}}, "default_headers"),
    ({"model": "gpt-4o-mini", "seed": -1}, "seed"),
    ({"model": "gpt-4o-mini", "temperature": 3}, "temperature"),
    ({"model": "gpt-4o-mini", "tool_choice": "always"}, "tool_choice"),
    ({"model": "gpt-4o-mini", "timeout_s": 0}, "timeout_s"),
    ({"model": "gpt-4o-mini", "api_key_env": "DATABASE_URL"}, "api_key_env"),
    ({"model": "gpt-4o-mini", "base_url": "http://127.0.0.1:9/v1"}, "base_url"),
    ({"model": "gpt-4o-mini", "max_tokens": "many"}, "max_tokens"),
])
def test_it_rejects_a_bad_config_naming_the_key(config: dict, key: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        OpenAIAdapter(config)

    assert caught.value.code == ErrorCode.INVALID_ADAPTER_CONFIG
    assert caught.value.details["key"] == key
    assert SECRET not in caught.value.message


def test_its_children_keep_the_config() -> None:
    adapter = OpenAIAdapter({"model": "gpt-4o-mini", "max_tokens": 128})

    child = adapter.for_child("pricer")

    assert isinstance(child, OpenAIAdapter)
    assert child.public_config() == {"endpoint": "openai", "model": "gpt-4o-mini", "max_tokens": 128}
    assert child.model_name == "gpt-4o-mini"


def test_a_run_picks_only_a_model_its_endpoint_allows() -> None:
    vllm = ModelEndpoint("vllm", "openai", "http://127.0.0.1:9/v1", None, ("qwen", "llama"))

    with pytest.raises(ProtocolError) as caught:
        OpenAIAdapter({"model": "gpt-4o"}, endpoint=vllm)

    assert caught.value.details["key"] == "model"
    assert "qwen, llama" in caught.value.message
    assert OpenAIAdapter({"model": "llama"}, endpoint=vllm).model_name == "llama"


# --- a real OpenAI-compatible server --------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m llama_cpp.server`` serving the SmolLM2 GGUF; yields its /v1 base URL."""
    model = local_model_or_skip(server=True)
    port = _free_port()
    # To a file, not a pipe: llama.cpp logs ~200 kB while loading, which would fill an
    # unread pipe and stall the server.
    log_path = tmp_path_factory.mktemp("llama_server") / "server.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model),
         "--chat_format", "chatml-function-calling", "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "4096"],
        stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                pytest.fail(f"llama_cpp.server exited early:\n{tail}")
            try:
                if httpx.get(f"{base_url}/models", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama_cpp.server did not answer /v1/models within 120 s")
            time.sleep(0.3)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _llama(base_url: str) -> ModelEndpoint:
    return ModelEndpoint("llama-server", "openai", base_url)


@pytest.mark.local_model
async def test_it_makes_a_forced_tool_call_on_a_real_server(llama_server: str,
                                                            monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    adapter = OpenAIAdapter({"model": "smollm2",
                             "tool_choice": "required", "temperature": 0, "max_tokens": 200,
                             "timeout_s": 120}, endpoint=_llama(llama_server))
    messages = [{"role": "system", "content": "Return your result with yield_control."},
                {"role": "user", "content": "Task done: the price of TSLA is 175.22 USD."}]

    turn = await adapter.complete(messages, [YIELD_CONTROL])

    assert len(turn.tool_calls) == 1
    call = turn.tool_calls[0]
    assert call.name == "yield_control"
    assert isinstance(call.arguments, dict)
    assert call.arguments["status"] in ("SUCCESS", "FAILURE", "PARTIAL_COMPLETION")
    assert isinstance(call.arguments["output_payload"], dict)
    assert turn.input_tokens > 0 and turn.output_tokens > 0


@pytest.mark.local_model
async def test_it_streams_plain_text_from_a_real_server(llama_server: str, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    adapter = OpenAIAdapter({"model": "smollm2", "temperature": 0, "max_tokens": 24,
                             "timeout_s": 120}, endpoint=_llama(llama_server))
    deltas: list[str] = []

    async def on_text(text: str) -> None:
        deltas.append(text)

    turn = await adapter.complete([{"role": "user", "content": "Say hello in one sentence."}],
                                  [], on_text=on_text)

    assert len(deltas) > 1
    assert "".join(deltas) == turn.text
    assert turn.text.strip()
    assert turn.tool_calls == []


@pytest.mark.local_model
async def test_it_gets_an_automatic_tool_choice_from_a_server_that_cannot_stream_it(
        llama_server: str, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    adapter = OpenAIAdapter({"model": "smollm2", "temperature": 0, "max_tokens": 120,
                             "timeout_s": 120}, endpoint=_llama(llama_server))
    messages = [{"role": "system", "content": "Return your result with yield_control."},
                {"role": "user", "content": "Task done: the price of TSLA is 175.22 USD."}]

    turn = await adapter.complete(messages, [YIELD_CONTROL])

    assert turn.text or turn.tool_calls
    for call in turn.tool_calls:
        assert call.name == "yield_control"
        assert isinstance(call.arguments, dict)



async def test_a_forced_tool_choice_names_the_function(provider_http) -> None:
    http = provider_http.play(provider_http.sse(tool_stream('{"status": "FAILURE", "output_payload": {}}')))
    adapter = OpenAIAdapter(FAST, http_client=http.client())

    turn = await adapter.complete(MESSAGES, [YIELD_CONTROL], tool_choice="yield_control")

    assert turn.tool_calls[0].name == "yield_control"
    assert http.body()["tool_choice"] == {"type": "function", "function": {"name": "yield_control"}}


LABELLED_YIELD = {**YIELD_CONTROL, "output_shapes": {"labels": {"sentiment": ["positive", "negative", "mixed"]}}}


def _token(text: str, probability: float, *alternatives: tuple[str, float]) -> dict:
    import math

    return {"token": text, "logprob": math.log(probability), "bytes": None,
            "top_logprobs": [{"token": alt, "logprob": math.log(p), "bytes": None} for alt, p in alternatives]}


async def test_it_asks_for_logprobs_when_the_answer_has_labels_and_reads_their_probability(provider_http) -> None:
    answer = '{"status": "SUCCESS", "output_payload": {"sentiment": "negative"}}'
    pieces = ['{"status": "SUCCESS", "output_payload": {"sentiment', '": "']
    tokens = [_token(piece, 0.99) for piece in pieces]
    tokens += [_token("neg", 0.7, ("mix", 0.2), ("pos", 0.1)), _token('ative"}}', 0.99)]
    response = provider_http.json(200, {
        "id": "chatcmpl-3", "object": "chat.completion", "created": 1, "model": "a-server-model",
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": {"content": tokens},
                     "message": {"role": "assistant", "content": answer}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}})
    http = provider_http.play(response)
    adapter = OpenAIAdapter({**FAST, "stream": False}, http_client=http.client())

    turn = await adapter.complete(MESSAGES, [LABELLED_YIELD])

    assert (http.body()["logprobs"], http.body()["top_logprobs"]) == (True, 5)
    assert "output_shapes" not in json.dumps(http.body()["tools"])
    score = turn.label_scores["sentiment"]
    assert score["value"] == "negative" and score["probability"] == pytest.approx(0.7)
    assert score["calibrated"] is False


async def test_it_asks_for_no_logprobs_without_labels_or_when_configured_not_to(provider_http) -> None:
    spans_only = {**YIELD_CONTROL, "output_shapes": {"labels": {"answer": ["Jan Wessels", "1757"]},
                                                     "spans": {"answer": ["Jan Wessels", "1757"]}}}
    http = provider_http.play(provider_http.sse(TEXT_STREAM))
    await OpenAIAdapter(FAST, http_client=http.client()).complete(MESSAGES, [YIELD_CONTROL])
    await OpenAIAdapter({**FAST, "logprobs": False}, http_client=http.client()).complete(MESSAGES, [LABELLED_YIELD])
    await OpenAIAdapter(FAST, http_client=http.client()).complete(MESSAGES, [spans_only])   # written freely
    assert all("logprobs" not in http.body(index) for index in range(3))
