"""A rationale or generalization question is read with its parents: the admin labels and searches a
rationale by its item's id and question and filters it by its source, the API names its source, the
question admin shows and searches its item's question as the original. So the model permission that
reads every rationale (``studies.view_rationale``) or question (``studies.view_generalizationquestion``)
reads only those whose item (``items_for_user``) and, for a rationale, source (``sources_for_user``) the
user may read too (``rationales_for_user``, ``generalization_questions_for_user``): without
``studies.view_item`` / ``studies.view_rationalesource`` not another researcher's study's items and
sources, which the items and sources pages and endpoints refuse him."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from studies.api.tokens import api_token_create
from studies.models import GeneralizationQuestion, Rationale
from studies.selectors import (
    generalization_questions_for_user,
    items_for_jobs,
    items_for_user,
    rationales_for_user,
)
from tests.annotations.factories import make_study
from tests.factories import GeneralizationQuestionFactory, ItemFactory, RationaleFactory
from tests.studies.helpers import RESEARCHER, researcher

pytestmark = pytest.mark.django_db

SECRET = "OLGA-SECRET"
LIBRARY_VIEWS = ("studies.view_item", "studies.view_rationalesource")


def _api(user) -> APIClient:
    _, key = api_token_create(user=user, name="test", read_only=True, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _admin(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def lab():
    """Olga's open study (two items whose question holds ``SECRET``, one source, the items' rationales
    and generalization questions), and Sam's own open study; Sam holds no model permission but
    ``studies.view_generalizationquestion`` and ``studies.view_rationale``."""
    olga = researcher("olga", *RESEARCHER)
    olgas = make_study(n_items=2, n_sources=1, owner=olga, name="olgas-study", question_text=SECRET + " question {i}?",
                       rationale_text="Olga's rationale {item}.")
    sam = researcher("sam", "studies.view_generalizationquestion", "studies.view_rationale")
    sams = make_study(n_items=2, n_sources=2, owner=sam, name="sams-study", question_text="Sam's question {i}?",
                      rationale_text="Sam's rationale {item}.")
    return SimpleNamespace(olga=olga, olgas=olgas, olga_source=olgas.sources.get(), olga_items=list(olgas.items.all()),
                           sam=sam, sams=sams, sam_sources=list(sams.sources.all()), sam_items=list(sams.items.all()))


def _rows(client, url, **params) -> list[dict]:
    response = client.get(url, {"page_size": 1000, **params})
    assert response.status_code == 200, response.content[:500]
    return response.json()["results"]


def test_the_api_lists_only_rationales_and_questions_whose_item_and_source_sam_may_read(lab):
    sam = _api(lab.sam)
    olga_item = lab.olga_items[0]
    # What the audit found: Sam may not read Olga's items and source themselves...
    assert sam.get(f"/api/v1/items/{olga_item.pk}/").status_code == 404
    assert sam.get(f"/api/v1/rationale-sources/{lab.olga_source.pk}/").status_code == 404

    # ...so her rationales (their item and source name) and questions are not his to read either.
    rationales = _rows(sam, "/api/v1/rationales/")
    assert {(r["item"], r["source"]) for r in rationales} == {(i.pk, s.pk) for i in lab.sam_items
                                                              for s in lab.sam_sources}
    assert {r["source_name"] for r in rationales} == {s.name for s in lab.sam_sources}
    questions = _rows(sam, "/api/v1/generalization-questions/")
    assert {q["item"] for q in questions} == {i.pk for i in lab.sam_items}
    hidden_rationale = Rationale.objects.filter(item=olga_item).first()
    hidden_question = GeneralizationQuestion.objects.filter(item=olga_item).first()
    assert sam.get(f"/api/v1/rationales/{hidden_rationale.pk}/").status_code == 404
    assert sam.get(f"/api/v1/generalization-questions/{hidden_question.pk}/").status_code == 404
    assert _rows(sam, "/api/v1/rationales/", source=lab.olga_source.name) == []


def test_the_question_admin_search_is_no_oracle_on_another_researchers_item_text(lab, admin_client):
    url = reverse("admin:studies_generalizationquestion_changelist")
    sam = _admin(lab.sam)
    listed = sam.get(url)
    assert listed.status_code == 200
    assert {q.item_id for q in listed.context["cl"].result_list} == {i.pk for i in lab.sam_items}
    assert SECRET not in listed.content.decode()  # no row shows her item's question as its original
    searched = sam.get(url, {"q": SECRET})
    assert searched.context["cl"].result_count == 0
    assert sam.get(url, {"q": lab.olga_items[0].external_id}).context["cl"].result_count == 0
    assert lab.olgas.dataset_id not in _filter_choices(listed, "item__dataset")

    hidden = GeneralizationQuestion.objects.filter(item=lab.olga_items[0]).first()
    page = sam.get(reverse("admin:studies_generalizationquestion_change", args=[hidden.pk]))
    assert page.status_code == 302 and page["Location"] == reverse("admin:index")  # as a missing row

    # A superuser still reads (and finds) them all.
    assert admin_client.get(url, {"q": SECRET}).context["cl"].result_count == 4  # 2 items x 2 questions


def test_the_rationale_admin_searches_and_filters_only_by_items_and_sources_sam_may_read(lab, admin_client):
    url = reverse("admin:studies_rationale_changelist")
    sam = _admin(lab.sam)
    listed = sam.get(url)
    assert listed.status_code == 200
    assert {r.item_id for r in listed.context["cl"].result_list} == {i.pk for i in lab.sam_items}
    sources = {s.pk for s in lab.sam_sources}
    assert _filter_choices(listed, "source") == sources  # the list filter names no other source
    assert lab.olga_source.name not in listed.content.decode()
    assert lab.olgas.dataset_id not in _filter_choices(listed, "item__dataset")
    for term in (SECRET, lab.olga_items[0].external_id, lab.olga_source.name):
        assert sam.get(url, {"q": term}).context["cl"].result_count == 0, term
    filtered = sam.get(url, {"source__id__exact": lab.olga_source.pk})
    assert filtered.context["cl"].result_count == 0

    hidden = Rationale.objects.filter(item=lab.olga_items[0]).first()
    page = sam.get(reverse("admin:studies_rationale_change", args=[hidden.pk]))
    assert page.status_code == 302 and SECRET not in page.content.decode()

    everything = admin_client.get(url)
    assert _filter_choices(everything, "source") == sources | {lab.olga_source.pk}
    assert admin_client.get(url, {"q": SECRET}).context["cl"].result_count == 2


def _filter_choices(response, field_path: str) -> set[int]:
    """The ids a relation's list filter offers (none when Django hides it: a single choice)."""
    specs = [s for s in response.context["cl"].filter_specs if getattr(s, "field_path", None) == field_path]
    return {pk for spec in specs for pk, _ in spec.lookup_choices}


def test_the_library_views_still_read_every_rationale_and_question(lab):
    reader = researcher("reader", "studies.view_rationale", "studies.view_generalizationquestion", *LIBRARY_VIEWS)
    assert rationales_for_user(user=reader).count() == Rationale.objects.count() == 6
    assert generalization_questions_for_user(user=reader).count() == GeneralizationQuestion.objects.count() == 8

    items_only = researcher("ivy", "studies.view_rationale", "studies.view_generalizationquestion", "studies.view_item")
    assert generalization_questions_for_user(user=items_only).count() == 8  # every item is hers to read
    # ...but not a source: only the rationales of the sources a study of hers lists (none).
    assert not rationales_for_user(user=items_only).exists()


def test_the_readable_rows_are_one_query(lab, django_assert_num_queries):
    sam = lab.sam
    sam.has_perm("studies.view_rationale")  # the permissions, read once per request
    with django_assert_num_queries(1):
        assert len(list(rationales_for_user(user=sam))) == 4
    with django_assert_num_queries(1):
        assert len(list(generalization_questions_for_user(user=sam))) == 4


def test_the_rows_on_sams_own_unshown_items_stay_his_to_read(lab):
    """An item of Sam's own dataset that no study shows (his train split: what his jobs read, send and
    train on, ``items_for_jobs``) is his to build on, so its rationales and questions, which his jobs
    and imports write and his question jobs draw as demonstrations, stay his to read."""
    train = ItemFactory(dataset=lab.sams.dataset, split="train", question="Sam's train question?")
    rationale = RationaleFactory(item=train, source=lab.sam_sources[0])
    question = GeneralizationQuestionFactory(item=train)
    assert train not in items_for_user(user=lab.sam) and train in items_for_jobs(user=lab.sam)
    assert rationale in rationales_for_user(user=lab.sam)
    assert question in generalization_questions_for_user(user=lab.sam)
