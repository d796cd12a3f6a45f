"""A run tree's usage after its server was killed mid-tree and started again: counted from
what happened (the event log), so the resumed tree reads exactly what a clean run reads."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from delegations.models import Run, RunEvent
from tests.conftest import _test_database_url, bearer, serve, stop_server
from tests.delegations import scripts

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

USAGE = {"input_tokens": 100, "output_tokens": 10}
# a call costs 1.25 USD: figures a float sums exactly in any order, so "equal" means equal
PRICES = {"input_per_mtok": 10_000.0, "output_per_mtok": 25_000.0}
METERED = ("model_calls", "input_tokens", "output_tokens", "total_tokens", "cost_usd")
LEASE_S = 5


def slow_child(turns: int, delay_ms: int) -> dict[str, Any]:
    steps = [{"text": f"Step {n}.", "delay_ms": delay_ms, "usage": USAGE,
              "tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]}
             for n in range(turns)]
    return {"prices": PRICES, "script": [*steps, scripts.yield_turn(usage=USAGE)]}


def two_children(turns: int = 3, delay_ms: int = 600) -> dict[str, Any]:
    """A root that delegates to two children working ``turns`` slow turns each (a child may
    make 5 model calls), then answers."""
    return {"prices": PRICES,
            "script": [scripts.delegate_turn("a", "b", usage=USAGE),
                       {"text": "Both are done.", "usage": USAGE, "tool_calls": [
                           {"name": "list_files", "arguments": {"path": "."}}]},
                       scripts.yield_turn(usage=USAGE)],
            "children": {label: slow_child(turns, delay_ms) for label in ("a", "b")}}


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def start_tree(url: str, user: Any) -> str:
    response = httpx.post(f"{url}/api/runs", headers=bearer(user), timeout=15, json={
        "packet": scripts.packet(capabilities=["fs_read"], max_iterations=20,
                                 budget={"max_model_calls": 40, "max_tokens": 100_000}),
        "adapter": {"name": "scripted", "config": two_children()}})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def finished(root_id: str, timeout: float) -> Run:
    return wait_for(lambda: Run.objects.filter(pk=root_id, state="COMPLETE").first(), timeout,
                    f"run {root_id} to complete")


def usage_by_label(root_id: str) -> dict[str, dict[str, Any]]:
    """Every run of the tree (the root, then its children by label) with its metered usage,
    on its row and in its result."""
    out = {}
    for run in Run.objects.filter(root_id=root_id):
        assert run.state == "COMPLETE", (run.label, run.state, run.error)
        result = RunEvent.objects.get(run=run, type="result").data["usage"]
        out[run.label if run.parent_id else "root"] = {"row": {key: run.usage[key] for key in METERED},
                          "result": {key: result[key] for key in METERED}}
    return out


@pytest.fixture
def server_log(tmp_path: Path) -> Iterator[Any]:
    with (tmp_path / "server.log").open("w") as log:
        yield log


def test_a_tree_whose_server_was_killed_mid_tree_counts_exactly_the_usage_of_a_clean_run(
        composer: Any, server_log: Any, settings: Any, tmp_path: Path) -> None:
    database_url = _test_database_url()
    server_settings = {"HANDOFF_LEASE_SECONDS": str(LEASE_S),
                       "HANDOFF_WORKSPACE_ROOT": str(tmp_path / "workspaces")}
    server, url = serve(database_url, server_log, **server_settings)
    try:
        clean_id = start_tree(url, composer)
        finished(clean_id, 60)

        crashed_id = start_tree(url, composer)
        # both children are halfway through their turns: their calls are charged to the
        # root only in memory, as the root's last checkpoint was saved before they started
        wait_for(lambda: RunEvent.objects.filter(run__root_id=crashed_id, run__depth=1,
                                                 type="model_call").count() >= 3, 30,
                 "the children's first turns")
        server.kill()
        server.wait(timeout=10)
        server, url = serve(database_url, server_log, **server_settings)
        crashed = finished(crashed_id, 60)
    finally:
        stop_server(server)

    assert crashed.recoveries == 1
    clean = usage_by_label(clean_id)
    assert clean["root"]["row"] == {"model_calls": 11, "input_tokens": 1100, "output_tokens": 110,
                                    "total_tokens": 1210, "cost_usd": 11 * 1.25}
    assert usage_by_label(crashed_id) == clean
    # no model call was made twice: one model_call event per scripted turn
    calls = RunEvent.objects.filter(run__root_id=crashed_id, type="model_call").count()
    assert calls == clean["root"]["row"]["model_calls"]
