"""A changelist's address is no oracle into rows the user may not read (``LookupGuardAdmin`` in
``studies.admin.scoping``). Django's admin accepted any lookup on a row's own fields and any
one-relation lookup, reverse ones included: Alice, a staff researcher who may read only her own
studies and not raw worker ids, could spell out her workers' raw platform ids
(``?external_id__startswith=``), learn what they did in Olga's studies (``?assignments=<Olga's
assignment>``) and what Olga's hidden study draws (``/admin/studies/item/?studies=<Olga's study>``),
and a few addresses were 500s. Each now answers 400; the raw-id lookups stay open to a holder of
``studies.view_raw_worker_ids``; and every filter link the app and Django's list filters draw still
answers 200."""
from __future__ import annotations

import html
import re

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.urls import reverse

from annotations.models import Participant
from cockpit.views_common import study_links
from cockpit.workers import answers_url
from studies.models import Dataset, Item, RationaleSource
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

HUGE = "9" * 30
PARTICIPANTS = "/admin/annotations/participant/"
ITEMS = "/admin/studies/item/"
SOURCES = "/admin/studies/rationalesource/"
DATASETS = "/admin/studies/dataset/"


@pytest.fixture
def world():
    """Alice's and Olga's studies, each worked by two Prolific workers; ``PID-shared`` worked in both."""
    alice, alice_client = staff_client("alice")
    olga, _ = staff_client("olga")
    alices = open_utility_study(name="alices", n_items=2, n_sources=1, quota=2, owner=alice)
    olgas = open_utility_study(name="olgas", n_items=2, n_sources=1, quota=2, owner=olga)
    mine = [work(alices, "PID-shared"), work(alices, "PID-alice-only")]
    theirs = [work(olgas, "PID-shared"), work(olgas, "PID-olga-only")]
    return {"alice": alice, "client": alice_client, "alices": alices, "olgas": olgas, "mine": mine,
            "theirs": theirs}


def _rows(response) -> int:
    """How many rows the changelist lists."""
    return response.context["cl"].result_count


def _refused(client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 400, (url, response.status_code)


def test_raw_worker_ids_cannot_be_spelled_out_through_a_list_filter(world):
    client = world["client"]
    assert _rows(client.get(PARTICIPANTS)) == 2  # Alice's workers are hers to list, by pseudonym
    for url in (
        PARTICIPANTS + "?external_id__startswith=PID-",
        PARTICIPANTS + "?external_id__startswith=ZZZ",
        PARTICIPANTS + "?external_id__gt=PID-m",
        PARTICIPANTS + "?external_id=PID-shared",
        PARTICIPANTS + "?external_id__in=PID-shared,PID-x",
        PARTICIPANTS + "?external_id__isnull=False",
        "/admin/annotations/platformsubmission/?worker_id__startswith=5f0",
        "/admin/annotations/platformsubmission/?worker_id=5f0",
        "/admin/annotations/platformcall/?request_summary__worker_id=5f0",
        "/admin/annotations/platformcall/?response__has_key=results",
        "/admin/annotations/assignment/?participant__external_id__startswith=PID",
        "/admin/annotations/annotation/?claim__participant__external_id__startswith=PID",
        "/admin/annotations/bonus/?participant__external_id=PID-shared",
    ):
        _refused(client, url)
    said = client.get(PARTICIPANTS + "?external_id__startswith=PID-").content.decode()
    assert "'external_id__startswith'" in said and "studies.view_raw_worker_ids" in said  # what and why
    said = client.get(ITEMS + "?question__regex=[").content.decode()
    assert "'regex' is not a lookup a list filter uses" in said


def test_a_holder_of_the_raw_id_permission_still_filters_by_an_exact_raw_id(world):
    lee, client = staff_client("lee")
    lee.user_permissions.add(Permission.objects.get(codename="view_raw_worker_ids"))
    lee.is_superuser = True  # every study: the raw-id rule alone is under test
    lee.save()
    found = client.get(PARTICIPANTS + "?external_id=PID-shared")
    assert found.status_code == 200 and _rows(found) == 1
    assert client.get("/admin/annotations/platformsubmission/?worker_id=5f0").status_code == 200
    assert client.get("/admin/annotations/platformcall/?response__has_key=results").status_code == 200
    # a prefix is no list filter's lookup, for anybody
    _refused(client, PARTICIPANTS + "?external_id__startswith=PID-")


def test_what_alices_workers_did_elsewhere_is_not_asked_through_their_relations(world):
    client = world["client"]
    highest = max(a.pk for a in world["mine"])
    for name in ("assignments", "blocks", "bonuses", "qualification_grants", "participant_links"):
        assert Participant._meta.get_field(name).auto_created  # a reverse relation, as audited
    for url in (
        PARTICIPANTS + f"?assignments__gt={highest}",
        PARTICIPANTS + f"?assignments={world['theirs'][0].pk}",
        PARTICIPANTS + f"?assignments__id__in={world['theirs'][0].pk}",
        PARTICIPANTS + f"?assignments__study={world['olgas'].pk}",
        PARTICIPANTS + "?blocks__isnull=False",
        PARTICIPANTS + "?bonuses__isnull=False",
        PARTICIPANTS + "?qualification_grants__isnull=False",
        PARTICIPANTS + "?participant_links__isnull=False",
    ):
        _refused(client, url)


def test_what_a_hidden_study_is_made_of_is_not_asked_through_the_library_lists(world):
    client = world["client"]
    olgas = world["olgas"].pk
    for model, names in ((Item, ("studies", "unit_scores", "units", "generation_failures")),
                         (RationaleSource, ("studies", "generation_jobs", "answered_genu_predictions")),
                         (Dataset, ("studies",))):
        for name in names:
            field = model._meta.get_field(name)
            assert field.auto_created or field.many_to_many
    for url in (
        ITEMS + f"?studies={olgas}",
        ITEMS + "?studies=999999",
        ITEMS + f"?studies__id__in={olgas}",
        ITEMS + "?unit_scores__isnull=False",
        ITEMS + "?units=1",
        ITEMS + "?generation_failures=1",
        SOURCES + f"?studies={olgas}",
        SOURCES + "?generation_jobs=1",
        SOURCES + "?answered_genu_predictions=1",
        DATASETS + f"?studies={olgas}",
        "/admin/studies/genuprediction/?answerer_source=1",
        "/admin/studies/study/?sources__name__startswith=o",
    ):
        _refused(client, url)


def test_addresses_that_were_500s_are_400s(world):
    client = world["client"]
    for url in (
        ITEMS + f"?studies={HUGE}",
        PARTICIPANTS + f"?assignments__gt={HUGE}",
        PARTICIPANTS + "?external_id__regex=(",
        ITEMS + "?question__regex=[",
        ITEMS + "?choices__contains=1",
        "/admin/annotations/annotation/?answered_at__year=" + HUGE,
        "/admin/annotations/platformcall/?created_at__year=" + HUGE,
        f"/admin/scoring/scorerun/?study__id__exact={HUGE}",
        "/admin/scoring/scorerun/?study__id__exact=abc",
        f"/admin/annotations/annotation/?claim__study__id__exact={world['alices'].pk}&claim__participant__id__exact=x",
    ):
        _refused(client, url)
    assert client.get("/admin/annotations/platformcall/?created_at__year=2024").status_code == 200


def test_the_filter_links_the_app_draws_still_answer(world):
    client = world["client"]
    study = world["alices"]
    participant = world["mine"][0].participant_id
    urls = [url for key, _, url in study_links(study) if "?" in url]
    assert len(urls) == 4  # answers, flags, publications, score runs
    urls += [
        answers_url(study.pk, participant),
        answers_url(study.pk, participant) + "&attention=failed",  # the attention warning's link
        "/admin/annotations/platformsubmission/?flag__in=worker_mismatch,not_on_platform"
        f"&publication__study__id__exact={study.pk}",  # the publish page's "work on hold"
        "/admin/studies/generationfailure/?job__id__exact=1",  # a job's failures (studies.admin.lm)
        "/admin/studies/droppedquestion/?job__id__exact=1",  # a job's dropped questions
        "/admin/studies/generalizationquestion/?"  # an import's conflicting answers (import_messages)
        f"item__dataset__id__exact={study.dataset_id}&metadata__has_key=conflicting_answers",
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
    assert _rows(client.get(answers_url(study.pk, participant))) > 0


def test_every_list_filter_django_draws_still_answers(world):
    """Each changelist of the apps, and every filter choice in its sidebar, as Alice."""
    client = world["client"]
    checked = 0
    for model in admin.site._registry:
        if model._meta.app_label not in ("studies", "annotations", "scoring"):
            continue
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        page = client.get(url)
        if page.status_code == 403:
            continue
        assert page.status_code == 200, (url, page.status_code)
        for query in set(re.findall(r'href="(\?[^"]+)"', page.content.decode())):
            response = client.get(url + html.unescape(query))
            assert response.status_code == 200, (url + html.unescape(query), response.status_code)
            checked += 1
    assert checked > 50
