"""End to end on the scale-out stack: PostgreSQL, Redis, the ASGI server as its own process and
two RQ workers; everything over HTTP and websockets."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.conf import settings

from delegations.models import Approval, Run
from delegations.runs.worker import HEARTBEAT_SECONDS
from tests.conftest import bearer
from tests.delegations import scripts
from tests.scaleout.conftest import ScaleOutStack
from tests.scaleout.runs import (
    assert_gapless,
    assert_viewer_saw_everything,
    finished,
    slow_tree,
    start_run,
    wait_for,
    watch,
)

pytestmark = [pytest.mark.scaleout, pytest.mark.slow]


def test_readiness_checks_the_database_the_channel_layer_and_the_queue_s_redis(
        live_stack: ScaleOutStack) -> None:
    body = httpx.get(f"{live_stack.url}/api/ready", timeout=10).json()
    assert body["ready"] is True
    assert body["database"]["vendor"] == "postgresql"
    assert body["channel_layer"]["backend"] == "RedisChannelLayer"
    assert body["task_queue"] == {"ok": True, "backend": "rq"}
    # the previous test's database flush took the workers' heartbeat rows with it: each
    # worker writes its row again within a heartbeat
    def health() -> dict[str, Any] | None:
        workers = httpx.get(f"{live_stack.url}/api/health", timeout=10).json()["workers"]
        return workers if workers["alive"] >= 2 else None
    workers = wait_for(health, HEARTBEAT_SECONDS + 3, "both RQ workers in /api/health")
    assert workers["backend"] == "rq"


def test_a_run_tree_runs_on_the_rq_workers_and_a_viewer_gets_every_event_once(
        api: httpx.Client, live_stack: ScaleOutStack, session_cookie: str) -> None:
    root_id = start_run(api, slow_tree(children=2, grandchildren=2, delay_ms=150))
    viewer = watch(live_stack.url, root_id, session_cookie)
    root = finished(root_id)
    assert root.state == "COMPLETE", (root.error, list(Run.objects.filter(root_id=root_id).values_list("state", "error")))
    assert Run.objects.filter(root_id=root_id).count() == 7
    assert set(Run.objects.filter(root_id=root_id).values_list("state", flat=True)) == {"COMPLETE"}
    assert_gapless(root_id)
    assert_viewer_saw_everything(viewer, root_id)
    assert api.get(f"/api/runs/{root_id}").json()["state"] == "COMPLETE"


def test_runs_started_together_are_spread_over_both_workers(
        api: httpx.Client, live_stack: ScaleOutStack) -> None:
    ids = [start_run(api, {"script": [{"text": "Working.", "delay_ms": 1500},
                                      scripts.yield_turn()]}) for _ in range(2)]

    def workers() -> set[int | None] | None:
        leases = list(Run.objects.filter(pk__in=ids).exclude(lease_owner="")
                      .values_list("lease_owner", flat=True))
        # the lease owner is host-<work horse pid>-...
        found = {live_stack.worker_of(int(owner.rsplit("-", 2)[1])) for owner in leases}
        return found if len(found) == 2 else None

    assert wait_for(workers, 15, "both runs to be executing at once") == {0, 1}
    assert {finished(run_id).state for run_id in ids} == {"COMPLETE"}


def test_a_cancel_sent_to_the_server_stops_a_tree_executing_in_a_worker(
        api: httpx.Client, live_stack: ScaleOutStack) -> None:
    root_id = start_run(api, slow_tree(children=2, grandchildren=1, delay_ms=50, turns=1,
                                      leaf_delay_ms=30_000))
    wait_for(lambda: Run.objects.filter(root_id=root_id).count() == 5, 20, "the whole tree to start")
    response = api.post(f"/api/runs/{root_id}/cancel", json={"reason": "enough"})
    assert response.status_code == 200, response.text
    assert finished(root_id, timeout=10).state == "CANCELLED"
    assert set(Run.objects.filter(root_id=root_id).values_list("state", flat=True)) == {"CANCELLED"}
    assert_gapless(root_id)


def test_a_run_parks_for_approval_without_a_worker_and_resumes_on_the_decision(
        api: httpx.Client, live_stack: ScaleOutStack, approver: Any) -> None:
    root_id = start_run(api, scripts.needs_approval(), capabilities=["file_delete"])
    approval = wait_for(lambda: Approval.objects.filter(run_id=root_id, status="pending").first(),
                        20, "the inbox item")
    run = wait_for(lambda: Run.objects.filter(pk=root_id, state="AWAITING_APPROVAL", lease_owner="")
                   .first(), 10, "the run to park and release its worker")
    assert run.lease_expires_at is None
    with httpx.Client(base_url=live_stack.url, headers=bearer(approver), timeout=15) as inbox:
        decided = inbox.post(f"/api/approvals/{approval.pk}/decision",
                             json={"decision": "approve", "comment": "fine"})
    assert decided.status_code == 200, decided.text
    assert finished(root_id).state == "COMPLETE"
    assert_gapless(root_id)


def test_rq_jobs_carry_the_configured_timeout(live_stack: ScaleOutStack) -> None:
    """Without one RQ would kill a work horse after its default 180 s, mid-run."""
    import django_rq
    from rq.job import Job

    from delegations.models.runs import new_run_id
    from delegations.runs.queue import execute_run

    result = execute_run.enqueue(new_run_id())  # an unknown run: the job just returns
    job = Job.fetch(result.id, connection=django_rq.get_connection("default"))
    assert job.timeout == settings.HANDOFF_RQ_JOB_TIMEOUT > 180
