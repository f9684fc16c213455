"""Property-based test of the whole API against its own OpenAPI schema (Schemathesis): generated
requests, authenticated with a researcher's read-write token, never get a 5xx, and responses match
the documented schemas. Bounded (a few examples per operation) so that it runs in CI in well under
a minute."""
from __future__ import annotations

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance

from studies.api.tokens import api_token_create
from tests.api.conftest import build_study, grant

MAX_EXAMPLES = 6


@pytest.fixture
def api_token(make_user, settings):
    # Generated writes must not run into the rate limit (that is tested elsewhere).
    settings.RL_API_THROTTLE_RATES = {"api_write": "100000/min", "api_export": "100000/min"}
    user = make_user(
        "fuzz", perms=["studies.add_study", "studies.add_importrecord", "scoring.add_scorerun"]
    )
    grant(user, "studies.add_generationjob")
    build_study(user, name="fuzz-study")
    _, key = api_token_create(user=user, name="schemathesis", read_only=False, by=None)
    return key


@pytest.fixture
def api_schema(db):
    # The WSGI handler closes "old" connections at the end of each request, which would close the
    # test's transaction; Django's own test client disconnects the same signal handlers.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    raw = SchemaGenerator().get_schema(request=None, public=True)
    yield schemathesis.from_dict(raw, app=get_wsgi_application())
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


schema = schemathesis.from_pytest_fixture("api_schema")


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,  # keep no example database in the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
)
def test_api_never_answers_5xx(case, api_token):
    response = case.call_wsgi(headers={"Authorization": f"Token {api_token}"})
    case.validate_response(response, checks=(not_a_server_error, response_schema_conformance))
