"""The admin shows each researcher what the visibility selectors let them read, as the API does:
another researcher's reference content (datasets, items, sources, rationales, generalization
questions), LM job records (failures, dropped questions), Gen-U predictions and imports are not
listed, searched, offered in a list filter or a form's picker, and their pages answer as a
missing row's do (Django's redirect to the admin index), whatever Django's model permissions
would open. The owner and a superuser still see them."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from studies.api.tokens import api_token_create
from studies.lm.questions import DROP_REASONS
from studies.models import (
    DroppedQuestion,
    GenerationFailure,
    GenerationJob,
    GenUPrediction,
    ImportRecord,
    RationaleSource,
)
from studies.services.importers import import_run
from studies.services.sharing import study_share
from studies.services.studies import study_create
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import (
    DatasetFactory,
    GeneralizationQuestionFactory,
    ItemFactory,
    RationaleFactory,
)
from tests.studies.helpers import researcher, write_jsonl
from tests.work import open_utility_study

pytestmark = pytest.mark.django_db

SECRET_RATIONALE = "ALICE-PRIVATE-RATIONALE-TEXT"
SECRET_URL = "https://alice-private.example/v1"
SECRET_TEMPLATE = "ALICE-SECRET-TEMPLATE {question}"
SECRET_RAW = "ALICE-SECRET-RAW-OUTPUT"
SECRET_QUESTION = "ALICE-SECRET-QUESTION"


def _without(user, *codenames):
    user.user_permissions.remove(*Permission.objects.filter(content_type__app_label="studies", codename__in=codenames))
    return get_user_model().objects.get(pk=user.pk)


@pytest.fixture
def world():
    """Alice (every model permission) and Bob (every one but those that read all reference data
    and all LM jobs) each run a study on the public dataset with their own source; Alice also has
    a private dataset no study of Bob's uses, an LM job with a failure and a dropped question, and
    Gen-U predictions of her source."""
    alice, alice_client = staff_client("alice")
    bob, bob_client = researcher_without_reference_views("bob")
    bob = _without(bob, "view_generationjob", "change_generationjob")
    public = DatasetFactory(name="public-ds")
    items = [ItemFactory(dataset=public, split="test", external_id=f"pq{i}", question=f"Public question {i}?")
             for i in range(2)]
    secret_ds = DatasetFactory(name="alice-secret-ds")
    secret_item = ItemFactory(dataset=secret_ds, split="test", external_id="alice-secret-item",
                              question=SECRET_QUESTION + "?")
    bob_src = RationaleSource.objects.create(name="bob-src", kind="lm", backend="openai", model_name_or_path="bob-model")
    private = RationaleSource.objects.create(name="alice-private", kind="lm", backend="openai",
                                             model_name_or_path="alice-model", endpoint_url=SECRET_URL,
                                             template=SECRET_TEMPLATE)
    predictions = {}
    for i, item in enumerate(items):
        RationaleFactory(item=item, source=bob_src, text=f"bob rationale {i}")
        RationaleFactory(item=item, source=private, text=SECRET_RATIONALE)
        question = GeneralizationQuestionFactory(item=item, text=f"public genq {i}?")
        for source, raw in ((private, SECRET_RAW), (bob_src, "BOB-RAW")):
            predictions[source.name, i] = GenUPrediction.objects.create(
                generalization_question=question, rationale_source=source, answerer="I",
                answerer_model=f"{source.name}-model", predicted_answer="yes", correct=True, raw_output=raw)
    secret_question = GeneralizationQuestionFactory(item=secret_item, text=SECRET_QUESTION + " rephrased?")
    alices = study_create(name="alices-study", dataset=public, sources=[private], owner=alice, consent_text="ok")
    bobs = study_create(name="bobs-study", dataset=public, sources=[bob_src], owner=bob, consent_text="ok")
    alice_job = GenerationJob.objects.create(kind="rationales", source=private, dataset=public, created_by=alice,
                                             total=2)
    bob_job = GenerationJob.objects.create(kind="rationales", source=bob_src, dataset=public, created_by=bob,
                                           total=2)
    reason = next(iter(DROP_REASONS))
    failures = {
        "alice": GenerationFailure.objects.create(job=alice_job, item=items[0], raw_output=SECRET_RAW,
                                                  reason="did not parse"),
        "bob": GenerationFailure.objects.create(job=bob_job, item=items[0], raw_output="BOB-FAIL",
                                                reason="did not parse"),
    }
    dropped = {
        "alice": DroppedQuestion.objects.create(job=alice_job, item=items[0], qtype="rephrase", sample_index=0,
                                                text="alice dropped", reason=reason, raw_output=SECRET_RAW),
        "bob": DroppedQuestion.objects.create(job=bob_job, item=items[0], qtype="rephrase", sample_index=0,
                                              text="bob dropped", reason=reason, raw_output="BOB-DROP"),
    }
    return dict(alice=alice, alice_client=alice_client, bob=bob, bob_client=bob_client, public=public,
                items=items, secret_ds=secret_ds, secret_item=secret_item, secret_question=secret_question,
                bob_src=bob_src, private=private, alices=alices, bobs=bobs, alice_job=alice_job, bob_job=bob_job,
                failures=failures, dropped=dropped, predictions=predictions)


def _missing(response) -> bool:
    """Django's answer to a change, delete or history page of a row not in the admin's queryset."""
    return response.status_code == 302 and response["Location"] == reverse("admin:index")


def _text(response) -> str:
    return response.content.decode()


# --- LM job records ---------------------------------------------------------------------------


@pytest.mark.parametrize("model, own_text", [("generationfailure", "BOB-FAIL"), ("droppedquestion", "bob dropped")])
def test_job_records_list_only_the_jobs_the_user_may_read(world, admin_client, model, own_text):
    bob_client, alice_client = world["bob_client"], world["alice_client"]
    listed = bob_client.get(reverse(f"admin:studies_{model}_changelist"))
    assert listed.status_code == 200
    body = _text(listed)
    assert own_text in body
    assert SECRET_RAW not in body and "alice dropped" not in body
    assert "alice-private" not in body  # the job column and the job filter name the job's source
    searched = bob_client.get(reverse(f"admin:studies_{model}_changelist"), {"q": "ALICE"})
    assert SECRET_RAW not in _text(searched) and searched.context["cl"].result_count == 0

    records = world["failures"] if model == "generationfailure" else world["dropped"]
    alices = records["alice"]
    for view in ("change", "history"):
        hidden = bob_client.get(reverse(f"admin:studies_{model}_{view}", args=[alices.pk]))
        assert _missing(hidden), view
        assert SECRET_RAW not in _text(hidden)
    assert bob_client.get(reverse(f"admin:studies_{model}_change", args=[records["bob"].pk])).status_code == 200

    own = alice_client.get(reverse(f"admin:studies_{model}_change", args=[alices.pk]))  # the owner still reads it
    assert own.status_code == 200 and SECRET_RAW in _text(own)
    everything = admin_client.get(reverse(f"admin:studies_{model}_changelist"))
    assert everything.context["cl"].result_count == 2


# --- Gen-U predictions ------------------------------------------------------------------------


def test_genu_predictions_show_only_those_of_questions_and_sources_the_user_may_read(world, admin_client):
    bob_client = world["bob_client"]
    url = reverse("admin:studies_genuprediction_changelist")
    listed = bob_client.get(url)
    assert listed.status_code == 200
    body = _text(listed)
    assert "bob-src" in body
    assert "alice-private" not in body  # neither a row nor the source filter names it
    assert set(listed.context["cl"].result_list) == {world["predictions"]["bob-src", i] for i in range(2)}
    assert bob_client.get(url, {"q": "ALICE-SECRET"}).context["cl"].result_count == 0

    hidden = world["predictions"]["alice-private", 0]
    response = bob_client.get(reverse("admin:studies_genuprediction_change", args=[hidden.pk]))
    assert _missing(response) and SECRET_RAW not in _text(response)
    own = bob_client.get(reverse("admin:studies_genuprediction_change", args=[world["predictions"]["bob-src", 0].pk]))
    assert own.status_code == 200 and "BOB-RAW" in _text(own)

    alices = world["alice_client"].get(reverse("admin:studies_genuprediction_change", args=[hidden.pk]))
    assert alices.status_code == 200 and SECRET_RAW in _text(alices)
    assert admin_client.get(url).context["cl"].result_count == 4


# --- reference content ------------------------------------------------------------------------


def test_content_lists_hold_only_what_the_api_shows_a_researcher_without_the_view_permissions(world, admin_client):
    bob_client = world["bob_client"]
    rationales = bob_client.get(reverse("admin:studies_rationale_changelist"))
    body = _text(rationales)
    assert rationales.status_code == 200 and "bob rationale 0" in body
    assert SECRET_RATIONALE not in body and "alice-private" not in body  # rows, source filter
    sources = bob_client.get(reverse("admin:studies_rationalesource_changelist"), {"q": "alice"})
    assert sources.context["cl"].result_count == 0 and "alice-private" not in _text(sources)
    datasets = bob_client.get(reverse("admin:studies_dataset_changelist"))
    assert list(datasets.context["cl"].result_list) == [world["public"]]
    items = bob_client.get(reverse("admin:studies_item_changelist"))
    assert "alice-secret-item" not in _text(items) and "alice-secret-ds" not in _text(items)  # rows, dataset filter
    assert items.context["cl"].result_count == 2

    for client, n_sources in ((world["alice_client"], 2), (admin_client, 2)):  # the owner and a superuser
        page = client.get(reverse("admin:studies_rationale_changelist"))
        assert SECRET_RATIONALE in _text(page) and page.context["cl"].result_count == 4
        assert client.get(reverse("admin:studies_rationalesource_changelist")).context["cl"].result_count == n_sources
        assert "alice-secret-item" in _text(client.get(reverse("admin:studies_item_changelist")))


def test_hidden_content_pages_answer_as_missing_rows(world):
    bob_client, private = world["bob_client"], world["private"]
    for view in ("change", "delete", "history"):
        response = bob_client.get(reverse(f"admin:studies_rationalesource_{view}", args=[private.pk]))
        assert _missing(response), view
        body = _text(response)
        assert SECRET_URL not in body and "ALICE-SECRET-TEMPLATE" not in body
    missing = bob_client.get(reverse("admin:studies_rationalesource_change", args=[999999]))
    assert _missing(missing)  # the same answer as an id that does not exist
    hidden_rationale = private.rationales.first()
    assert _missing(bob_client.get(reverse("admin:studies_rationale_change", args=[hidden_rationale.pk])))
    assert _missing(bob_client.get(reverse("admin:studies_dataset_change", args=[world["secret_ds"].pk])))
    assert _missing(bob_client.get(reverse("admin:studies_item_change", args=[world["secret_item"].pk])))
    posted = bob_client.post(reverse("admin:studies_rationalesource_change", args=[private.pk]),
                             {"name": "renamed", "kind": "lm"})
    assert _missing(posted)
    private.refresh_from_db()
    assert private.name == "alice-private"

    own = bob_client.get(reverse("admin:studies_rationalesource_change", args=[world["bob_src"].pk]))
    assert own.status_code == 200
    alices = world["alice_client"].get(reverse("admin:studies_rationalesource_change", args=[private.pk]))
    assert alices.status_code == 200 and SECRET_URL in _text(alices)


def test_generalization_questions_need_the_view_permission_or_a_study(world):
    bob = _without(world["bob"], "view_generalizationquestion")
    world["bob_client"].force_login(bob)
    listed = world["bob_client"].get(reverse("admin:studies_generalizationquestion_changelist"))
    assert listed.status_code == 200 and SECRET_QUESTION not in _text(listed)
    assert listed.context["cl"].result_count == 2
    hidden = world["bob_client"].get(reverse("admin:studies_generalizationquestion_change",
                                             args=[world["secret_question"].pk]))
    assert _missing(hidden) and SECRET_QUESTION not in _text(hidden)


def test_autocomplete_offers_only_visible_sources(world):
    response = world["bob_client"].get(reverse("admin:autocomplete"), {
        "app_label": "studies", "model_name": "rationale", "field_name": "source", "term": ""})
    assert response.status_code == 200
    assert [r["text"] for r in response.json()["results"]] == ["bob-src"]


# --- forms that list datasets and sources -----------------------------------------------------


def test_genu_action_form_offers_only_datasets_and_sources_the_user_may_read(world):
    response = world["bob_client"].post(reverse("admin:studies_rationalesource_changelist"), {
        "action": "generate_genu_answers", "_selected_action": [world["bob_src"].pk]})
    assert response.status_code == 200
    form = response.context["form"]
    assert list(form.fields["dataset"].queryset) == [world["public"]]
    assert list(form.fields["answerer_i"].queryset) == [world["bob_src"]]
    assert list(form.fields["answerer_ir"].queryset) == [world["bob_src"]]
    body = _text(response)
    assert "alice-private" not in body and "alice-secret-ds" not in body

    alices = world["alice_client"].post(reverse("admin:studies_rationalesource_changelist"), {
        "action": "generate_genu_answers", "_selected_action": [world["private"].pk]})
    assert set(alices.context["form"].fields["answerer_i"].queryset) == {world["bob_src"], world["private"]}
    assert "alice-secret-ds" in _text(alices)


def test_genu_action_refuses_a_hidden_answerer(world):
    response = world["bob_client"].post(reverse("admin:studies_rationalesource_changelist"), {
        "action": "generate_genu_answers", "_selected_action": [world["bob_src"].pk], "apply": "1",
        "dataset": world["public"].pk, "split": "test", "batch_size": 16,
        "answerer_i": world["private"].pk, "answerer_ir": world["bob_src"].pk})
    assert response.status_code == 200 and "answerer_i" in response.context["form"].errors
    assert not GenerationJob.objects.filter(kind="genu_answers").exists()


def test_finetune_action_form_still_renders(world):
    response = world["bob_client"].post(reverse("admin:studies_dataset_changelist"), {
        "action": "finetune_on_dataset", "_selected_action": [world["public"].pk]})
    assert response.status_code == 200 and "base_model" in response.context["form"].fields


def test_import_page_suggests_only_datasets_the_user_may_read(world, admin_client):
    page = world["bob_client"].get(reverse("admin:studies_import_data"))
    assert page.status_code == 200
    assert page.context["dataset_names"] == ["public-ds"] and "alice-secret-ds" not in _text(page)
    assert "alice-secret-ds" in admin_client.get(reverse("admin:studies_import_data")).context["dataset_names"]


# --- import records ---------------------------------------------------------------------------


def test_import_records_list_what_the_api_lists(world, admin_client):
    """``import_records_for_user``, the API's rule: a researcher who may change import records sees
    his own and those into what he may read; the view permission opens the page, not another
    researcher's imports (Alice's is into a dataset no study of Bob's uses)."""
    alice, bob, bob_client = world["alice"], world["bob"], world["bob_client"]
    bob = _without(bob, "view_importrecord")
    bob.user_permissions.add(Permission.objects.get(content_type__app_label="studies", codename="change_importrecord"))
    secret = ImportRecord.objects.create(kind="items", filename="alice-secret.csv", sha256="a" * 64,
                                         dataset=world["secret_ds"], imported_by=alice, created=1,
                                         summary={"note": "ALICE-SUMMARY"})
    bobs = ImportRecord.objects.create(kind="items", filename="bob.csv", sha256="c" * 64, dataset=world["public"],
                                       imported_by=bob)
    url = reverse("admin:studies_importrecord_changelist")
    listed = bob_client.get(url)
    assert listed.status_code == 200
    assert list(listed.context["cl"].result_list) == [bobs]
    body = _text(listed)
    assert "alice-secret.csv" not in body and "alice-secret-ds" not in body  # rows, dataset filter
    response = bob_client.get(reverse("admin:studies_importrecord_change", args=[secret.pk]))
    assert _missing(response) and "ALICE-SUMMARY" not in _text(response)

    bob.user_permissions.add(Permission.objects.get(content_type__app_label="studies", codename="view_importrecord"))
    assert list(bob_client.get(url).context["cl"].result_list) == [bobs]
    assert _missing(bob_client.get(reverse("admin:studies_importrecord_change", args=[secret.pk])))
    assert admin_client.get(url).context["cl"].result_count == 2


# --- counts per row ---------------------------------------------------------------------------


def olga_shares_a_study_with_lee(tmp_path, owner=None) -> SimpleNamespace:
    """Olga (every model permission) runs an open study of 2 test items and 1 source; she then imports
    5 train items into the same dataset (no study draws them), each with a rationale of her source,
    and shares the study with Lee for viewing. Lee holds ``view_study``, ``change_dataset`` and
    ``change_rationalesource``, none of the permissions that read all reference data. Carol reads the
    whole library (the view permissions of datasets, items, sources and rationales) and owns nothing.
    ``owner``: Olga's (user, client) if not a staff client with every permission."""
    olga, olga_client = owner or staff_client("olga")
    study = open_utility_study(name="olga", n_items=2, n_sources=1, owner=olga)
    dataset, source = study.dataset, study.sources.get()
    items = tmp_path / "olga_train.csv"
    items.write_text("id,question,answer,split\n" + "".join(
        f"olga-train-{i},Is train question {i} true?,yes,train\n" for i in range(5)))
    items_record = import_run(kind="items", file=items, dataset_name=dataset.name, user=olga)
    rationales = write_jsonl(tmp_path / "olga_train_rationales.jsonl", [
        {"item_id": f"olga-train-{i}", "source": source.name, "rationale": f"Olga's train rationale {i}."}
        for i in range(5)])
    rationales_record = import_run(kind="rationales", file=rationales, dataset_name=dataset.name, user=olga)
    lee = researcher("lee", "studies.view_study", "studies.change_dataset", "studies.change_rationalesource",
                     "studies.view_importrecord")
    study_share(study=study, user=olga, with_user=lee)
    carol = researcher("carol", "studies.view_dataset", "studies.view_item", "studies.view_rationalesource",
                       "studies.view_rationale", "studies.view_importrecord")
    clients = {"olga": olga_client}
    for user in (lee, carol):
        clients[user.username] = Client()
        clients[user.username].force_login(user)
    return SimpleNamespace(olga=olga, lee=lee, carol=carol, clients=clients, study=study, dataset=dataset,
                           source=source, items_record=items_record, rationales_record=rationales_record)


def api_client(user) -> APIClient:
    _, key = api_token_create(user=user, name="t", by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _dataset_counts(client, dataset) -> tuple:
    """The items, train, dev and test columns of ``dataset``'s row, as the list shows them."""
    cl = client.get(reverse("admin:studies_dataset_changelist")).context["cl"]
    row = next(row for row in cl.result_list if row.pk == dataset.pk)
    admin = cl.model_admin
    return admin.n_items(row), admin.n_train(row), admin.n_dev(row), admin.n_test(row)


def _source_count(client, source) -> int:
    cl = client.get(reverse("admin:studies_rationalesource_changelist")).context["cl"]
    return cl.model_admin.n_rationales(next(row for row in cl.result_list if row.pk == source.pk))


def test_a_view_share_counts_only_the_items_its_study_shows(tmp_path):
    """A view share reads the study's items, not the rest of its dataset: the dataset list counts the
    items the reader may read (``items_for_user``), as the API's ``n_items`` does (one selector,
    ``datasets_counted_for_user``), never the 5 unshown train items."""
    lab = olga_shares_a_study_with_lee(tmp_path)
    lee = lab.clients["lee"]

    assert _dataset_counts(lee, lab.dataset) == (2, 0, 0, 2)
    assert api_client(lab.lee).get(f"/api/v1/datasets/{lab.dataset.pk}/").json()["n_items"] == 2
    page = lee.get(reverse("admin:studies_dataset_changelist"), {"o": "3"})  # sorted by the count
    assert 3 in page.context["cl"].get_ordering_field_columns()
    assert list(page.context["cl"].result_list) == [lab.dataset]


def test_a_view_share_counts_only_the_rationales_its_study_shows(tmp_path):
    """The source list counts the rationales the reader may read (``rationales_for_user``): the study's
    items' rationales of the source, not those of the 5 unshown train items."""
    lab = olga_shares_a_study_with_lee(tmp_path)

    assert _source_count(lab.clients["lee"], lab.source) == 2


def test_the_owner_and_a_library_reader_still_count_every_item_and_rationale(tmp_path):
    lab = olga_shares_a_study_with_lee(tmp_path)

    for who, user in (("olga", lab.olga), ("carol", lab.carol)):
        assert _dataset_counts(lab.clients[who], lab.dataset) == (7, 5, 0, 2), who
        assert _source_count(lab.clients[who], lab.source) == 7, who
        assert api_client(user).get(f"/api/v1/datasets/{lab.dataset.pk}/").json()["n_items"] == 7, who



def test_an_owner_and_a_change_share_collaborator_without_the_library_views_count_what_they_build_on(tmp_path):
    """Reading the whole library is not needed to count one's own data: an owner without
    ``studies.view_item`` / ``view_rationale`` (and a collaborator with a change share) counted only
    the items and rationales a study draws (2 of 7), their own unshown train split as none."""
    from studies.models import StudyShare
    from tests.cockpit.test_study_owner_rights import researcher_without_reference_views

    lab = olga_shares_a_study_with_lee(tmp_path, owner=researcher_without_reference_views("olga"))
    dana, dana_client = researcher_without_reference_views("dana")
    study_share(study=lab.study, user=lab.olga, with_user=dana, level=StudyShare.Level.CHANGE)

    for who, user, client in (("olga", lab.olga, lab.clients["olga"]), ("dana", dana, dana_client)):
        assert _dataset_counts(client, lab.dataset) == (7, 5, 0, 2), who
        assert _source_count(client, lab.source) == 7, who
        assert api_client(user).get(f"/api/v1/datasets/{lab.dataset.pk}/").json()["n_items"] == 7, who
    assert _dataset_counts(lab.clients["lee"], lab.dataset) == (2, 0, 0, 2)  # a view share still reads the study's
    assert _source_count(lab.clients["lee"], lab.source) == 2
