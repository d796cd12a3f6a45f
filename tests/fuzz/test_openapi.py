"""Schemathesis against /api/openapi.json, in process (WSGI), as a real API-token user."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import bearer

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]

schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())


@pytest.fixture
def token_headers(composer: Any) -> Iterator[dict[str, str]]:
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
def test_the_api_answers_every_generated_request_without_a_server_error(
        case: Any, token_headers: dict[str, str]) -> None:
    case.call_and_validate(headers=token_headers, checks=CHECKS)
