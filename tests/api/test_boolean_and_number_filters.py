"""Every boolean filter of the API reads the one yes/no rule (``lab.api.filters.parse_boolean``),
the one ``include_raw_worker_ids`` reads, and answers 400 naming the parameter to anything else;
whole-number filters refuse fractions.

Before: plain django-filter boolean filters read only true/True/false/False/2/3, so ``1``, ``0``,
``yes``, ``TRUE`` or ``on`` were "no filter" (every row, 200: ``/studies/?mine=1`` listed shared
studies too), and ``gen_u=0.99`` or ``-0.9`` matched the units of Gen-U 0, ``1.9`` those of 1."""
from __future__ import annotations

import django_filters as df
import pytest
from django.urls import get_resolver

from lab.api import filters as api_filters
from scoring.models import UnitScore
from studies.models import Rationale, StudyShare
from studies.services.sharing import study_share

pytestmark = pytest.mark.django_db

# The words ``include_raw_worker_ids`` always read as yes, and their opposites, in any case.
TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")
SPELLINGS = {True: [*TRUE_WORDS, "TRUE", "Yes", " On "], False: [*FALSE_WORDS, "FALSE", "No", "OFF"]}


def ids(response):
    assert response.status_code == 200, response.content[:300]
    return sorted(row["id"] for row in response.json()["results"])


def test_every_spelling_of_a_unit_score_boolean_filters(client_for, study_data):
    client = client_for(study_data.study.owner)
    scores = UnitScore.objects.filter(study=study_data.study)
    for field in ("task_correct", "before_tie", "after_tie"):
        for value, spellings in SPELLINGS.items():
            expected = sorted(scores.filter(**{field: value}).values_list("pk", flat=True))
            for spelling in spellings:
                got = ids(client.get("/api/v1/scores/", {"study": study_data.study.pk, field: spelling}))
                assert got == expected, (field, spelling)
    # the fixture's t5 rationales predict the wrong answer: both values select 2 of the 4 units
    assert len(ids(client.get("/api/v1/scores/", {"study": study_data.study.pk, "task_correct": "1"}))) == 2


def test_every_spelling_of_prediction_correct_filters(client_for, study_data):
    client = client_for(study_data.study.owner)
    rationales = Rationale.objects.filter(source__studies=study_data.study)
    for value, spellings in SPELLINGS.items():
        expected = sorted(rationales.filter(prediction_correct=value).values_list("pk", flat=True))
        assert expected
        for spelling in spellings:
            got = ids(client.get("/api/v1/rationales/", {"study": study_data.study.pk, "prediction_correct": spelling}))
            assert got == expected, spelling


def test_mine_1_lists_only_my_studies(client_for, researcher, study_data, other_study_data):
    study_share(user=other_study_data.study.owner, study=other_study_data.study, with_user=researcher,
                level=StudyShare.Level.VIEW)
    client = client_for(researcher)
    assert ids(client.get("/api/v1/studies/")) == sorted([study_data.study.pk, other_study_data.study.pk])
    for spelling in SPELLINGS[True]:
        assert ids(client.get("/api/v1/studies/", {"mine": spelling})) == [study_data.study.pk], spelling
    for spelling in SPELLINGS[False]:
        assert ids(client.get("/api/v1/studies/", {"mine": spelling})) == [other_study_data.study.pk], spelling


@pytest.mark.parametrize(("path", "param"), [
    ("/api/v1/scores/", "task_correct"), ("/api/v1/scores/", "before_tie"), ("/api/v1/scores/", "after_tie"),
    ("/api/v1/rationales/", "prediction_correct"), ("/api/v1/studies/", "mine"),
    ("/api/v1/annotations/", "include_raw_worker_ids"),
])
@pytest.mark.parametrize("value", ["2", "3", "maybe", "tru", "1.0", "none"])
def test_any_other_value_is_a_400_naming_the_parameter_and_the_accepted_words(client_for, researcher, path, param,
                                                                              value):
    response = client_for(researcher).get(path, {param: value})
    assert response.status_code == 400, (param, value, response.status_code)
    (message,) = response.json()[param]
    assert message.startswith(f"{param}: {value!r} is not a yes/no value.")
    assert all(word in message for word in (*TRUE_WORDS, *FALSE_WORDS))


def test_an_empty_boolean_is_no_filter(client_for, study_data):
    client = client_for(study_data.study.owner)
    every = ids(client.get("/api/v1/scores/", {"study": study_data.study.pk}))
    assert ids(client.get("/api/v1/scores/", {"study": study_data.study.pk, "task_correct": ""})) == every


def test_gen_u_takes_whole_numbers_from_minus_one_to_one(client_for, study_data):
    client = client_for(study_data.study.owner)
    UnitScore.objects.filter(pk=study_data.scores[0].pk).update(gen_u=0)
    UnitScore.objects.filter(pk=study_data.scores[1].pk).update(gen_u=1)
    UnitScore.objects.filter(pk=study_data.scores[2].pk).update(gen_u=-1)
    for value, index in (("0", 0), ("1", 1), ("-1", 2)):
        assert ids(client.get("/api/v1/scores/", {"gen_u": value})) == [study_data.scores[index].pk]
    for value in ("0.99", "-0.9", "1.9", "0.5", "2", "-2", "99999999999999999999", "one"):
        response = client.get("/api/v1/scores/", {"gen_u": value})
        assert response.status_code == 400, (value, response.content[:300])
        assert list(response.json()) == ["gen_u"]


def test_the_schema_documents_gen_u_and_ids_as_integers_with_their_range(schema):
    parameters = {p["name"]: p for p in schema["paths"]["/api/v1/scores/"]["get"]["parameters"]}
    assert parameters["gen_u"]["schema"] == {"type": "integer", "minimum": -1, "maximum": 1}
    assert parameters["study"]["schema"]["type"] == "integer" and parameters["study"]["schema"]["minimum"] == 1
    assert parameters["task_correct"]["schema"] == {"type": "boolean"}


def api_filtersets():
    """The filter set classes of every view the URLconf routes to."""
    found = set()

    def walk(patterns):
        for pattern in patterns:
            if hasattr(pattern, "url_patterns"):
                walk(pattern.url_patterns)
                continue
            view = getattr(pattern.callback, "cls", None)
            if view is not None and getattr(view, "filterset_class", None) is not None:
                found.add(view.filterset_class)

    walk(get_resolver().url_patterns)
    return found


def test_no_api_filter_reads_booleans_or_numbers_by_django_filters_defaults():
    """A guard for filters added later: every boolean filter of the API is ``lab.api.filters.BooleanFilter``
    and every number filter a ``WholeNumberFilter`` (or one with its own reading, by a method), and
    every filter set is built on ``ApiFilterSet``, so a field added to its ``Meta.fields`` later is
    read so too (the annotations API's two were plain django-filter sets)."""
    filtersets = api_filtersets()
    assert len(filtersets) >= 8
    for filterset in filtersets:
        assert issubclass(filterset, api_filters.ApiFilterSet), filterset.__name__
        for name, filter_ in filterset.base_filters.items():
            if isinstance(filter_, df.BooleanFilter):
                assert isinstance(filter_, api_filters.BooleanFilter), (filterset.__name__, name)
            if isinstance(filter_, df.NumberFilter):
                assert isinstance(filter_, api_filters.WholeNumberFilter), (filterset.__name__, name)


@pytest.mark.parametrize(("path", "query"), [
    ("/api/v1/studies/", "mine=banana&mine=1"), ("/api/v1/studies/", "mine=1&mine=0"),
    ("/api/v1/annotations/", "include_raw_worker_ids=banana&include_raw_worker_ids=1"),
    ("/api/v1/scores/", "task_correct=1&task_correct=1"),
])
def test_a_parameter_given_twice_is_a_400_whatever_the_order(client_for, researcher, path, query):
    # Before, only the last value was read: "mine=banana&mine=1" passed, "mine=1&mine=0" meant 0.
    response = client_for(researcher).get(f"{path}?{query}")
    assert response.status_code == 400, (query, response.status_code)
    name = query.split("=")[0]
    (message,) = response.json()[name]
    assert message.startswith(f"Query parameter {name!r} is given 2 times: give it once")
