"""Hostile input to the API answers 4xx with a message, never 500 (issue 10 item 10)."""
from __future__ import annotations

import pytest

from tests.api.conftest import WRITE_PERMISSIONS, grant

pytestmark = pytest.mark.django_db

JSON_WRITE_URLS = ["/api/v1/studies/", "/api/v1/score-runs/", "/api/v1/generation-jobs/"]


@pytest.mark.parametrize("url", JSON_WRITE_URLS)
@pytest.mark.parametrize("depth", [65])
def test_json_nested_too_deep_is_a_400_saying_so(client_for, researcher, url, depth):
    # One level over the bound; 5,000 levels (RecursionError, a 500 before) is in tests/test_no_500.py.
    grant(researcher, "studies.add_generationjob", *WRITE_PERMISSIONS)
    body = "[" * depth + "]" * depth
    response = client_for(researcher).post(url, body, content_type="application/json")
    assert response.status_code == 400
    assert "nested more than 64 levels" in response.json()["detail"]


def test_json_at_the_depth_limit_is_parsed(client_for, researcher):
    body = '{"study": ' + "[" * 63 + "]" * 63 + "}"
    response = client_for(researcher).post("/api/v1/score-runs/", body, content_type="application/json")
    assert response.status_code == 400 and "study" in response.json()  # a field error, not a parse error


SUPERSCRIPT_TWO = "\u00b2"  # str.isdigit() says yes, int() refuses it
LONG_DIGITS = "9" * 5000  # str.isdigit() says yes, int() refuses over 4,300 digits


@pytest.mark.parametrize("url", [
    "/api/v1/studies/{pk}/cost/?max_assignments_per_hit=" + SUPERSCRIPT_TWO,
    "/api/v1/studies/{pk}/cost/?max_assignments_per_hit=" + LONG_DIGITS,
    "/api/v1/rationales/?source=" + SUPERSCRIPT_TWO,
    "/api/v1/rationales/?source=" + LONG_DIGITS,
    "/api/v1/generation-jobs/?source=" + SUPERSCRIPT_TWO,
    "/api/v1/scores/?source=" + SUPERSCRIPT_TWO,
    "/api/v1/studies/?source=" + SUPERSCRIPT_TWO,
    "/api/v1/annotations/?source=" + LONG_DIGITS,
])
def test_a_digit_int_refuses_is_an_answer_not_a_500(client_for, study_data, url):
    """An id given as text is one only in ASCII digits and within a key's size (``lab.ids.parse_id``):
    ``²`` or 5,000 nines is no id (a name, or a 400 naming the parameter), never a 500."""
    client = client_for(study_data.study.owner)
    client.raise_request_exception = False
    response = client.get(url.format(pk=study_data.study.pk))
    assert response.status_code in (200, 400), response.content[:300]
    if "max_assignments_per_hit" in url:
        assert response.status_code == 400 and "max_assignments_per_hit" in response.json()


@pytest.mark.parametrize("body, field", [
    ({"kind": "rationales", "source": SUPERSCRIPT_TWO, "dataset": 1}, "source"),
    ({"kind": "rationales", "source": LONG_DIGITS, "dataset": 1}, "source"),
    ({"kind": "rationales", "source": "x", "dataset": SUPERSCRIPT_TWO}, "dataset"),
])
def test_a_job_naming_a_source_or_dataset_by_an_odd_digit_is_a_400_naming_it(client_for, study_data, body, field):
    owner = grant(study_data.study.owner, "studies.add_generationjob")
    client = client_for(owner)
    client.raise_request_exception = False
    response = client.post("/api/v1/generation-jobs/", body, format="json")
    assert response.status_code == 400 and field in response.json(), response.content[:300]


def _cursor(position: str) -> str:
    """A cursor as DRF encodes one (base64 of its query string), holding a made-up position."""
    import base64
    from urllib.parse import quote, urlencode

    return quote(base64.b64encode(urlencode({"p": position}).encode()).decode())


@pytest.mark.parametrize("url", ["/api/v1/annotations/", "/api/v1/assignments/", "/api/v1/studies/",
                                 "/api/v1/items/", "/api/v1/scores/", "/api/v1/score-runs/"])
@pytest.mark.parametrize("position", ["abc", "2026-13-45"])
def test_a_made_up_cursor_is_a_404_saying_invalid_cursor(client_for, researcher, study_data, url, position):
    response = client_for(researcher).get(f"{url}?cursor={_cursor(position)}")
    assert response.status_code == 404, response.content[:300]
    assert response.json()["detail"] == "Invalid cursor"


def test_the_score_runs_form_lists_no_study_of_another_researcher(researcher, other_study_data):
    """The browsable API draws a form from the list's serializer: a writable ``study`` field listed
    every study on the server (id and name), whoever could start a run."""
    from django.test import Client

    grant(researcher, "scoring.add_scorerun")
    researcher.is_staff = True
    researcher.save()
    client = Client()
    client.force_login(researcher)
    page = client.get("/api/v1/score-runs/?format=api").content.decode()
    assert other_study_data.study.name not in page
    assert f'value="{other_study_data.study.pk}"' not in page


def _names_of(data) -> list[str]:
    """The names a researcher other than ``data``'s owner may not read: the study's dataset, sources and study."""
    return [data.study.dataset.name, *(source.name for source in data.sources), data.study.name]


@pytest.mark.parametrize("how", ["html", "format=api"])
def test_the_import_bundle_form_lists_no_dataset_or_source_of_another_researcher(
        client_for, researcher, study_data, other_study_data, how):
    """GET /studies/import-bundle/ in a browser draws the POST form from the view's serializer: it was
    StudySerializer, whose writable ``dataset`` and ``sources`` listed every researcher's datasets and
    sources (``datasets_for_user`` / ``sources_for_user`` hide them), to anyone with a token."""
    client = client_for(researcher)  # the default researcher: studies.add_study, no change_study
    if how == "html":
        response = client.get("/api/v1/studies/import-bundle/", HTTP_ACCEPT="text/html")
    else:
        response = client.get("/api/v1/studies/import-bundle/?format=api")
    page = response.content.decode()
    assert response.status_code == 405 and "<form" in page  # the page of a POST-only action, with its form
    for name in _names_of(other_study_data):
        assert name not in page, name
    assert study_data.study.dataset.name not in page  # nor the caller's own rows: nothing is listed
    assert 'name="file"' in page and 'type="file"' in page  # the import's own form: the bundle and a name


def test_the_withdrawals_form_lists_no_dataset_or_source_of_another_researcher(
        researcher, study_data, other_study_data):
    """GET /studies/<own id>/withdrawals/ in a browser, for a researcher with change rights: the form
    was StudySerializer's (every dataset and source on the server); it is WithdrawalRequestSerializer's."""
    from django.test import Client

    grant(researcher, "studies.change_study")
    client = Client()
    client.force_login(researcher)
    response = client.get(f"/api/v1/studies/{study_data.study.pk}/withdrawals/?format=api")
    page = response.content.decode()
    assert response.status_code == 200
    for name in _names_of(other_study_data):
        assert name not in page, name
    assert 'name="pseudonym"' in page and 'name="participant_identifier"' in page


def _post_forms(user):
    """(url name, action, serializer) of every write form the browsable API can draw for ``user``:
    each action of each registered viewset that takes POST, PUT or PATCH, with its
    ``get_serializer()`` as the renderer gets it (the request's user in its context)."""
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    from config.api_urls import router

    for prefix, viewset, _ in router.registry:
        for route in router.get_routes(viewset):
            for method, action in route.mapping.items():
                if method not in ("post", "put", "patch") or not hasattr(viewset, action):
                    continue
                request = Request(getattr(APIRequestFactory(), method)(f"/api/v1/{prefix}/"))
                request.user = user
                view = viewset(action=action, request=request, format_kwarg=None, kwargs={}, args=())
                yield prefix, action, view.get_serializer()


def test_no_write_form_of_the_api_lists_rows_the_user_may_not_see(researcher, study_data, other_study_data):
    """Every related field of a form the API can draw is either read only or limited to what the user
    may see: none offers another researcher's study, dataset, sources or items."""
    from rest_framework.relations import ManyRelatedField, RelatedField

    from studies.models import Dataset, Item, RationaleSource, Study

    hidden = {Study: [other_study_data.study.pk], Dataset: [other_study_data.study.dataset.pk],
              RationaleSource: [s.pk for s in other_study_data.sources], Item: [i.pk for i in other_study_data.items]}
    checked = set()
    for prefix, action, serializer in _post_forms(researcher):
        for name, field in serializer.fields.items():
            relation = field.child_relation if isinstance(field, ManyRelatedField) else field
            if not isinstance(relation, RelatedField) or field.read_only:
                continue
            queryset = relation.get_queryset()
            assert queryset.model in hidden, f"{prefix} {action}: {name} lists {queryset.model.__name__} rows"
            leaked = queryset.filter(pk__in=hidden[queryset.model])
            assert not leaked.exists(), f"{prefix} {action}: {name} lists {list(leaked)}"
        checked.add((prefix, action))
    assert {("studies", "create"), ("studies", "withdrawals"), ("studies", "import_bundle"),
            ("score-runs", "create"), ("imports", "create")} <= checked


def test_the_read_serializers_of_the_api_take_no_related_row_as_input():
    """A ModelSerializer of an ``api/serializers.py`` is a read representation: its related fields are
    read only, so a form drawn from it (today's view or a later one) lists no row of the server."""
    import inspect

    from rest_framework import serializers
    from rest_framework.relations import ManyRelatedField, RelatedField

    import annotations.api.serializers
    import cockpit.api.serializers
    import scoring.api.serializers
    import studies.api.jobs
    import studies.api.serializers

    writable = []
    for module in (studies.api.serializers, studies.api.jobs, annotations.api.serializers, scoring.api.serializers,
                   cockpit.api.serializers):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if not issubclass(cls, serializers.ModelSerializer) or cls.__module__ != module.__name__:
                continue
            for name, field in cls(context={"request": None}).fields.items():
                relation = field.child_relation if isinstance(field, ManyRelatedField) else field
                if isinstance(relation, RelatedField) and not field.read_only:
                    writable.append(f"{cls.__name__}.{name}")
    assert writable == []
