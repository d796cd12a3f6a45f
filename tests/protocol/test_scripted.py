"""The scripted adapter (deterministic replay) and the adapter registry."""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import Any

import pytest

from delegations.protocol import adapters
from delegations.protocol.adapters import ADAPTERS, make_adapter
from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.errors import ProtocolError

from .conftest import yield_turn


async def collect(adapter: ScriptedAdapter) -> tuple[Any, list[str]]:
    chunks: list[str] = []

    async def on_text(delta: str) -> None:
        chunks.append(delta)

    turn = await adapter.complete([{"role": "user", "content": "go"}], [], on_text=on_text)
    return turn, chunks


async def test_it_plays_turns_in_order_with_text_tool_calls_and_usage() -> None:
    adapter = ScriptedAdapter({"script": [
        {"text": "Looking into it, then answering.", "usage": {"input_tokens": 12, "output_tokens": 7}},
        {"tool_calls": [{"name": "yield_control", "arguments": '{"status": "SUCCESS", "output_payload": {}}'}]},
    ]})
    first, chunks = await collect(adapter)
    assert first.text == "Looking into it, then answering."
    assert "".join(chunks) == first.text and 1 < len(chunks) <= 3
    assert (first.input_tokens, first.output_tokens) == (12, 7)
    second, _ = await collect(adapter)
    assert second.tool_calls[0].name == "yield_control"
    assert second.tool_calls[0].arguments == {"status": "SUCCESS", "output_payload": {}}
    assert second.tool_calls[0].id == "call_1_0"
    assert adapter.position == 2


async def test_running_out_of_script_is_a_clear_tool_failure() -> None:
    adapter = ScriptedAdapter({"script": [yield_turn()]})
    await collect(adapter)
    with pytest.raises(ProtocolError) as caught:
        await collect(adapter)
    assert caught.value.code == "ERR_TOOL_FAILURE"
    assert "1 turn(s)" in caught.value.message and "Add a turn" in caught.value.message


@pytest.mark.parametrize(("config", "key"), [
    ({}, "script"),
    ({"script": "nope"}, "script"),
    ({"script": [], "scrpt": []}, "scrpt"),
    ({"script": [{"txt": "hi"}]}, "script[0].txt"),
    ({"script": [{"tool_calls": [{"arguments": {}}]}]}, "script[0].tool_calls[0].name"),
    ({"script": [{"tool_calls": [{"name": "x", "arguments": "{not json"}]}]}, "script[0].tool_calls[0].arguments"),
    ({"script": [{"usage": {"input_tokens": -1}}]}, "script[0].usage.input_tokens"),
    ({"script": [{"delay_ms": "soon"}]}, "script[0].delay_ms"),
    ({"script": [{"finish": "everything"}]}, "script[0].finish"),
    ({"script": [], "children": {"a": {"script": [{"text": 3}]}}}, "children.a.script[0].text"),
    ({"script": [], "prices": {"input_per_mtok": "free"}}, "prices.input_per_mtok"),
])
def test_a_bad_config_is_refused_naming_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        ScriptedAdapter(config)
    assert caught.value.code == "ERR_INVALID_ADAPTER_CONFIG"
    assert caught.value.details["key"] == key
    assert f"'{key}'" in caught.value.message


async def test_a_child_plays_the_script_of_its_label() -> None:
    adapter = ScriptedAdapter({"script": [], "children": {
        "writer": {"script": [{"text": "child text"}], "children": {"editor": {"script": []}}}}})
    child = adapter.for_child("writer")
    turn, _ = await collect(child)
    assert turn.text == "child text"
    assert isinstance(child.for_child("editor"), ScriptedAdapter)
    with pytest.raises(ProtocolError) as caught:
        adapter.for_child("painter")
    assert "painter" in caught.value.message and "writer" in caught.value.message


async def test_the_position_survives_export_and_restore() -> None:
    config = {"script": [{"text": "one"}, {"text": "two"}]}
    adapter = ScriptedAdapter(config)
    await collect(adapter)
    state = adapter.export_state()
    fresh = ScriptedAdapter(config)
    fresh.restore_state(state)
    turn, _ = await collect(fresh)
    assert turn.text == "two"
    with pytest.raises(ProtocolError):
        fresh.restore_state({"position": 9})


async def test_a_delay_is_waited_and_can_be_cancelled_at_once() -> None:
    adapter = ScriptedAdapter({"script": [{"text": "late", "delay_ms": 60_000}]})
    task = asyncio.create_task(collect(adapter))
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.perf_counter() - started < 0.1
    assert adapter.position == 0


async def test_without_a_delay_a_turn_never_yields_to_the_event_loop() -> None:
    adapter = ScriptedAdapter({"script": [yield_turn()]})
    coroutine = adapter.complete([], [])
    with pytest.raises(StopIteration) as done:
        coroutine.send(None)
    assert done.value.value.tool_calls[0].name == "yield_control"


def test_prices_in_the_config_set_the_cost() -> None:
    adapter = ScriptedAdapter({"script": [], "prices": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}})
    assert adapter.cost_usd(1_000_000, 500_000) == pytest.approx(3.0)
    assert ScriptedAdapter({"script": []}).cost_usd(10, 10) is None


def test_make_adapter_builds_the_named_adapter_and_refuses_an_unknown_name() -> None:
    adapter = make_adapter("scripted", {"script": [yield_turn()]})
    assert isinstance(adapter, ScriptedAdapter)
    with pytest.raises(ProtocolError) as caught:
        make_adapter("gpt-magic", {})
    assert caught.value.code == "ERR_INVALID_ADAPTER_CONFIG"
    assert "gpt-magic" in caught.value.message and "scripted" in caught.value.message
    assert set(ADAPTERS) >= {"local", "openai", "anthropic", "scripted"}


def test_a_missing_optional_dependency_fails_only_when_its_adapter_is_chosen(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = importlib.import_module

    def without_llama(name: str, package: str | None = None) -> Any:
        if name == ".local":
            raise ModuleNotFoundError("No module named 'llama_cpp'", name="llama_cpp")
        return real_import(name, package)

    monkeypatch.setattr(adapters.importlib, "import_module", without_llama)
    monkeypatch.setattr(adapters, "_classes", {})
    with pytest.raises(ProtocolError) as caught:
        make_adapter("local", {})
    assert caught.value.code == "ERR_INVALID_ADAPTER_CONFIG"
    assert "llama_cpp" in caught.value.message and "handoff[local]" in caught.value.message
    assert isinstance(make_adapter("scripted", {"script": []}), ScriptedAdapter)


def test_a_bad_config_through_make_adapter_names_the_key() -> None:
    with pytest.raises(ProtocolError) as caught:
        make_adapter("scripted", {"script": [{"delay_ms": -5}]})
    assert caught.value.details["key"] == "script[0].delay_ms"
