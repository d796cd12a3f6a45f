"""Backpressure: past the bound on runs waiting to start, every way of starting a run
answers 429 with Retry-After and says how many wait; nothing is written."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from delegations.composer.services import delegation_create
from delegations.models import Delegation, Run
from delegations.runs.workflows import RETRY_AFTER_MAX_S, run_cancel, run_create
from tests.conftest import bearer
from tests.delegations import scripts
from tests.delegations.composer.test_pages import form_data, page

pytestmark = [pytest.mark.django_db(transaction=True)]

WAITING = "2 runs of yours are waiting to start, and 2 is the most that may wait"
LEAF = json.dumps(scripts.leaf())


@pytest.fixture
def two_waiting(settings: Any, queued_tasks: None, composer: Any) -> list[Run]:
    """The composer's two runs wait for a worker (none runs), the most one owner may have waiting."""
    settings.HANDOFF_MAX_PENDING_RUNS_PER_OWNER = 2
    return [run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
            for _ in range(2)]


def start_over_api(client: Client, user: Any) -> Any:
    return client.post("/api/runs", {"packet": scripts.packet(), "adapter": {
        "name": "scripted", "config": scripts.leaf()}}, content_type="application/json", headers=bearer(user))


def assert_refused(response: Any, says: str = WAITING) -> None:
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= RETRY_AFTER_MAX_S
    text = response.json()["detail"] if response["Content-Type"] == "application/json" else page(response)
    assert says in text and f"Try again in {response['Retry-After']} s" in text


def test_past_the_owner_s_bound_a_new_run_is_refused_with_429_saying_how_many_wait(
        client: Client, composer: Any, two_waiting: list[Run]) -> None:
    response = start_over_api(client, composer)
    assert_refused(response)
    assert {"waiting": 2, "limit": 2}.items() <= response.json().items()
    assert Run.objects.count() == 2


def test_another_owner_still_starts_runs_until_the_bound_on_everyone_s(
        client: Client, other_composer: Any, two_waiting: list[Run], settings: Any) -> None:
    settings.HANDOFF_MAX_PENDING_RUNS = 3
    assert start_over_api(client, other_composer).status_code == 201
    assert_refused(start_over_api(client, other_composer),
                   "3 runs on this server are waiting to start, and 3 is the most that may wait")


def test_a_run_that_left_the_queue_makes_room_for_the_next(
        client: Client, composer: Any, two_waiting: list[Run]) -> None:
    run_cancel(run=two_waiting[0])
    assert start_over_api(client, composer).status_code == 201


def test_a_packet_with_lint_errors_is_still_recorded_as_rejected_since_it_never_waits(
        client: Client, composer: Any, two_waiting: list[Run]) -> None:
    response = client.post("/api/runs", {"packet": scripts.packet(depth=9, max_depth=3), "adapter": {
        "name": "scripted", "config": scripts.leaf()}}, content_type="application/json", headers=bearer(composer))
    assert response.status_code == 201 and response.json()["state"] == "REJECTED"


def test_every_other_way_of_starting_a_run_is_refused_the_same_way(
        client: Client, composer: Any, two_waiting: list[Run]) -> None:
    delegation = delegation_create(owner=composer, name="Caching study", packet=scripts.packet())
    rejected = run_create(packet=scripts.packet(depth=9, max_depth=3), adapter="scripted",
                          config=scripts.leaf(), owner=composer)
    api = bearer(composer)
    assert_refused(client.post(f"/api/delegations/{delegation.pk}/runs", {"adapter": {
        "name": "scripted", "config": scripts.leaf()}}, content_type="application/json", headers=api))
    assert_refused(client.post(f"/api/runs/{rejected.pk}/retry", {}, content_type="application/json",
                               headers=api))
    client.force_login(composer)
    assert_refused(client.post("/runs/new/", {"packet": json.dumps(scripts.packet()), "adapter": "scripted",
                                              "adapter_config": LEAF}))
    assert_refused(client.post(f"/runs/{rejected.pk}/retry/", {}))
    opened = client.get(f"/delegations/{delegation.pk}/")
    saved = client.post(f"/delegations/{delegation.pk}/", form_data(
        opened, action="run", adapter="scripted", adapter_config=LEAF))
    assert_refused(saved)
    assert "Saved as version 2." in page(saved) and Delegation.objects.get().version == 2
    assert_refused(client.post(f"/delegations/{delegation.pk}/dry-run/", form_data(opened, "dry-run-form")))
    assert_refused(client.post(f"/delegations/{delegation.pk}/tree/run/", {"adapter": "scripted",
                                                                          "adapter_config": LEAF}))
    assert Run.objects.count() == 3  # the two waiting and the rejected one


def test_the_lane_count_reads_only_runs_at_work_not_every_run_ever_made(composer: Any) -> None:
    """Every new run counts its owner's lane: on SQLite that query went through every root
    run ever made (9 ms with 20,000 finished ones), so an installation grew slower with use."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from delegations.runs.queue import lane_counts

    if connection.vendor != "sqlite":
        pytest.skip("reads SQLite's query plan")
    with CaptureQueriesContext(connection) as queries:
        lane_counts(composer.pk)
    (count,) = [query["sql"] for query in queries.captured_queries if "COUNT" in query["sql"]]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {count}")
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "run_state_parent (state=? AND parent_id=?)" in plan, plan


def test_the_lane_count_counts_as_the_lane_rules_say(composer: Any, django_user_model: Any) -> None:
    """The lane is counted in SQL written out (the ORM's compiled aggregate cost twenty times
    running it); here against the rules spelled in the ORM, over every kind of row: each
    lane state, allocated or not, finished runs, subagents, other owners, no owner."""
    from django.db import transaction
    from django.db.models import Count, Q
    from django.utils import timezone

    from delegations.models.runs import LANE_STATES
    from delegations.protocol.lifecycle import RunState
    from delegations.runs.queue import LaneCounts, lane_counts

    other = django_user_model.objects.create_user("other-owner")
    for owner in (composer, other, None):
        for state in (RunState.PENDING, RunState.ACCEPTED, RunState.WORKING, RunState.COMPLETE,
                      RunState.AWAITING_APPROVAL):
            for allocated in (None, timezone.now()):
                root = Run.objects.create(owner=owner, state=state, allocated_at=allocated, packet={})
                Run.objects.create(owner=owner, state=state, parent=root, root=root, packet={})

    def spelled(owner_id: int | None) -> LaneCounts:
        mine, pending = Q(owner_id=owner_id) if owner_id else Q(owner_id__isnull=True), Q(state=RunState.PENDING)
        return LaneCounts(**Run.objects.roots().filter(state__in=[RunState.PENDING, *LANE_STATES]).aggregate(
            mine_waiting_to_start=Count("pk", filter=mine & pending),
            waiting_to_start=Count("pk", filter=pending),
            mine_in_lane=Count("pk", filter=mine & (Q(state__in=LANE_STATES) | (pending & Q(allocated_at__isnull=False)))),
            mine_in_line=Count("pk", filter=mine & pending & Q(allocated_at__isnull=True))))

    with transaction.atomic():   # as run_create counts (PostgreSQL locks the owner's row)
        for owner_id in (composer.pk, other.pk, None):
            assert lane_counts(owner_id) == spelled(owner_id)
        assert lane_counts(composer.pk) == LaneCounts(mine_waiting_to_start=2, waiting_to_start=6,
                                                      mine_in_lane=5, mine_in_line=1)
