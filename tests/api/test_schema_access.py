"""The schema and its docs pages are for signed-in users, like the rest of the API
(``studies.api.access``: anonymous requests get 401 everywhere), and a researcher signed in to the
site reads them with the session alone; the ``ordering`` parameter is documented from the view's
``ordering_fields`` without building its queryset.

Before: drf-spectacular's ``SERVE_PERMISSIONS`` default (``AllowAny``) served anonymous callers
the 182 KB schema, rebuilt on every call (1 to 2.6 s of CPU each, unthrottled)."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from lab.api.filters import StrictOrderingFilter
from scoring.api.views import UnitScoreViewSet

pytestmark = pytest.mark.django_db

PAGES = ["/api/schema/", "/api/schema/?format=json", "/api/docs/", "/api/redoc/"]


@pytest.mark.parametrize("path", PAGES)
def test_anonymous_callers_get_401(anon, path):
    response = anon.get(path)
    assert response.status_code == 401, (path, response.status_code)
    assert response["WWW-Authenticate"].startswith("Token")


def test_a_researcher_signed_in_to_the_site_reads_the_docs_and_the_schema_they_load(researcher):
    client = APIClient()
    client.force_login(researcher)  # the session cookie of the admin site, no token
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "swagger-ui" in html and "/static/drf_spectacular_sidecar/" in html
    assert "cdn.jsdelivr" not in html and "unpkg.com" not in html
    assert client.get("/api/redoc/").status_code == 200
    schema = client.get("/api/schema/?format=json")  # what the docs page fetches, with the same cookie
    assert schema.status_code == 200
    assert "/api/v1/studies/" in schema.json()["paths"]


def test_a_token_reads_the_schema(client_for, researcher):
    assert client_for(researcher, read_only=True).get("/api/schema/").status_code == 200


def test_the_ordering_parameter_is_documented_from_ordering_fields_alone():
    """A view as the schema generator makes it (``swagger_fake_view``, no request): its
    ``get_queryset()``, which reads the user, is never called for the ordering terms."""
    view = UnitScoreViewSet()
    view.swagger_fake_view = True
    view.request = None
    with pytest.raises(AttributeError):
        view.get_queryset()  # it needs a request's user
    (parameter,) = StrictOrderingFilter().get_schema_operation_parameters(view)
    assert parameter["schema"]["items"]["enum"] == ["id", "-id", "updated_at", "-updated_at"]
