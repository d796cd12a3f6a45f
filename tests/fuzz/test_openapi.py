"""Schemathesis against /api/openapi.json, in process (WSGI), as a real API-token user:
every check (`--checks all`: status codes, content types, headers and bodies in the
published schema, auth that is not ignored, negative data refused...) on data that fits
the schema and data that does not."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.config import PositiveDataAcceptanceConfig
from schemathesis.generation import GenerationMode

from tests.conftest import bearer

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())
schema.config.generation.update(modes=list(GenerationMode))
# Data the schema allows may still mean nothing (a packet that does not parse, an unknown
# skill, a control character in a query): every operation documents 422 for that. A
# request the schema refuses must still be refused, and nothing may answer 5xx.
schema.config.checks.positive_data_acceptance = PositiveDataAcceptanceConfig(
    expected_statuses=["2xx", "3xx", "401", "403", "404", "409", "422", "429"])


@pytest.fixture
def token_headers(composer: Any, settings: Any) -> Iterator[dict[str, str]]:
    # the auth check sends wrong and missing tokens on purpose: with the usual limit, the
    # rest of the run would answer 429 (they share the test client's address)
    settings.HANDOFF_TOKEN_MAX_FAILURES = 1_000_000
    # Django's own test client does the same: the request must not close the test's
    # connection (and with it the transaction that holds the test's rows).
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield bearer(composer)
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@schema.parametrize()
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
def test_the_api_passes_every_check_on_generated_requests(case: Any, token_headers: dict[str, str]) -> None:
    case.call_and_validate(headers=token_headers)   # no `checks`: every built-in check
