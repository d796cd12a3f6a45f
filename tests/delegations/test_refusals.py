"""One refusal for every area: each area's name for it keeps its own default status, and
the API answers all of them the same way, Retry-After included."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from delegations.composer.services import DelegationError
from delegations.refusals import Refusal
from delegations.runs.workflows import RunError
from handoff_site.api import refused


def test_a_run_refusal_conflicts_and_a_composer_refusal_is_bad_input_unless_told() -> None:
    assert RunError("The run is still going.").status == 409
    assert DelegationError("Give the delegation a name.").status == 400
    assert DelegationError("No delegation 7 that you can see.", status=404).status == 404


@pytest.mark.parametrize("error", [
    RunError("Not started: 3 runs wait.", status=429, retry_after=4, details={"waiting": 3}),
    DelegationError("Not started: 3 runs wait.", status=429, retry_after=4, details={"waiting": 3}),
    Refusal("Not started: 3 runs wait.", status=429, retry_after=4, details={"waiting": 3}),
])
def test_the_api_answers_every_refusal_with_its_status_details_and_retry_after(error: Any) -> None:
    response: HttpResponse = refused(RequestFactory().get("/api/runs"), error)
    assert response.status_code == 429
    assert response["Retry-After"] == "4"
    assert json.loads(response.content) == {"detail": "Not started: 3 runs wait.", "waiting": 3}
