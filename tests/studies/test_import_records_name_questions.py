"""A generalization-question import names its questions in its record (``summary``: how many, per
type, of how many originals, and every question given twice with different answers, quoted with its
original), so reading the dataset is not enough to read it: another researcher reads the record only
when they may also read every question it wrote or matched (``import_records_for_user``, by the ids
the importer stores in ``summary["question_ids"]``), in the API's import list and the admin's alike.

Alice (every permission) imports "shared-ds" (test and dev items) and generalization questions of
its dev items, one of them given twice with opposite answers. Bob reads only what his studies use
(no view permission on datasets, items, sources, rationales or generalization questions); his own
study draws the test items, so he reads "shared-ds" and the test items' questions, not the dev ones."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from studies.models import Dataset, GeneralizationQuestion, ImportRecord, Study
from studies.selectors import datasets_for_user, generalization_questions_for_user, import_records_for_user
from studies.services.importers import generalization_questions_import, items_import_table
from studies.services.sharing import study_share
from studies.services.studies import study_create
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import RationaleSourceFactory
from tests.studies.helpers import write_json, write_jsonl

pytestmark = pytest.mark.django_db

SECRET = "Would a private dev rephrase leak?"


def _researcher_without_question_views(username: str):
    """``researcher_without_reference_views`` who does not read every generalization question either."""
    user, client = researcher_without_reference_views(username)
    user.user_permissions.remove(Permission.objects.get(content_type__app_label="studies",
                                                        codename="view_generalizationquestion"))
    return get_user_model().objects.get(pk=user.pk), client


def _items(tmp_path, split: str, n: int = 2) -> list[dict]:
    return [{"id": f"{split}{i}", "question": f"Is {split} question {i} true?", "answer": "yes"} for i in range(n)]


def _questions(tmp_path, name: str, data: dict, user):
    return generalization_questions_import(file=write_json(tmp_path / name, data), dataset_name="shared-ds",
                                           user=user)


@pytest.fixture
def lab(tmp_path):
    alice, alice_client = staff_client("alice")
    bob, bob_client = _researcher_without_question_views("bob")
    for split in ("test", "dev"):
        items_import_table(file=write_jsonl(tmp_path / f"items_{split}.jsonl", _items(tmp_path, split)),
                           dataset_name="shared-ds", task_format="yes_no", user=alice)
    dataset = Dataset.objects.get(name="shared-ds")
    study_create(name="bobs-study", dataset=dataset, split="test", owner=bob,
                 sources=[RationaleSourceFactory(name="bob-src")])  # draws the test items
    record = _questions(tmp_path, "alice-generalization.json", {
        "Is dev question 0 true?": [[SECRET, "True", "rephrase"], [SECRET, "False", "rephrase"]],
        "Is dev question 1 true?": [["Is a private dev counterfactual false?", "False", "counterfactual"]],
    }, alice)
    questions = GeneralizationQuestion.objects.filter(item__split="dev")
    assert record.summary["conflicting_answers"][0]["question"] == SECRET
    assert datasets_for_user(user=bob).filter(pk=dataset.pk).exists()
    assert not generalization_questions_for_user(user=bob).filter(pk__in=questions.values("pk")).exists()
    return {"alice": alice, "bob": bob, "clients": {"alice": alice_client, "bob": bob_client},
            "record": record, "dataset": dataset}


def _api(client) -> dict[int, dict]:
    response = client.get("/api/v1/imports/")
    assert response.status_code == 200
    return {row["id"]: row for row in response.json()["results"]}


def _admin_lists(client, record: ImportRecord) -> bool:
    response = client.get(reverse("admin:studies_importrecord_changelist"))
    assert response.status_code == 200
    return reverse("admin:studies_importrecord_change", args=[record.pk]) in response.content.decode()


def _sees(lab, who: str, record: ImportRecord | None = None) -> bool:
    """Whether ``who`` reads the record (Alice's private one by default), in the API, in the admin's
    list and on its own page (the three must agree)."""
    client, record = lab["clients"][who], record or lab["record"]
    in_api, in_admin = record.pk in _api(client), _admin_lists(client, record)
    page = client.get(reverse("admin:studies_importrecord_change", args=[record.pk]))
    assert in_api == in_admin == (page.status_code == 200)
    return in_api


def test_a_reader_of_the_dataset_does_not_read_an_import_of_questions_hidden_from_them(lab):
    bob_client, record = lab["clients"]["bob"], lab["record"]

    assert not _sees(lab, "bob")
    assert SECRET not in str(_api(bob_client))
    assert SECRET not in bob_client.get(reverse("admin:studies_importrecord_changelist")).content.decode()
    assert record not in import_records_for_user(user=lab["bob"])
    assert _sees(lab, "alice")
    assert SECRET in str(_api(lab["clients"]["alice"])[record.pk]["summary"])


def test_an_import_of_questions_the_reader_reads_stays_readable(lab, tmp_path):
    """Questions of the test items Bob's study draws: his to read, and so is their import, whoever
    imported them (Alice, the operator)."""
    by_alice = _questions(tmp_path, "alice-test.json", {
        "Is test question 0 true?": [["Is a shared test rephrase true?", "True", "rephrase"]]}, lab["alice"])
    by_operator = _questions(tmp_path, "operator-test.json", {
        "Is test question 1 true?": [["Is another shared test rephrase true?", "False", "rephrase"]]}, None)

    assert _sees(lab, "bob", by_alice)
    assert _sees(lab, "bob", by_operator)


def test_an_import_naming_a_hidden_question_and_a_readable_one_stays_hidden(lab, tmp_path):
    both = _questions(tmp_path, "alice-both.json", {
        "Is test question 0 true?": [["Is a shared test rephrase true?", "True", "rephrase"]],
        "Is dev question 1 true?": [["Is a private dev rephrase true?", "True", "rephrase"]]}, lab["alice"])

    assert not _sees(lab, "bob", both)
    assert _sees(lab, "alice", both)


def test_a_study_drawing_the_items_shared_with_the_reader_opens_the_record(lab):
    alice, bob = lab["alice"], lab["bob"]
    # Questions are shared as the app shares them: a study drawing their items, shared with the reader.
    study = study_create(name="alices-generalization", kind=Study.Kind.GENERALIZATION, dataset=lab["dataset"],
                         split="dev", sources=[RationaleSourceFactory(name="alice-src")], owner=alice, user=alice)
    assert not _sees(lab, "bob")
    study_share(study=study, user=alice, with_user=bob)

    assert _sees(lab, "bob")


def test_the_record_holds_the_ids_of_every_question_it_wrote_or_matched(lab, tmp_path):
    questions = GeneralizationQuestion.objects.filter(item__split="dev")
    assert lab["record"].summary["question_ids"] == sorted(questions.values_list("pk", flat=True))

    again = _questions(tmp_path, "alice-generalization-again.json", {
        "Is dev question 1 true?": [["Is a private dev counterfactual false?", "False", "counterfactual"],
                                    ["Is a new dev similar question true?", "True", "similar"]]}, lab["alice"])

    assert (again.created, again.unchanged) == (1, 1)
    assert again.summary["question_ids"] == sorted(
        questions.filter(item__external_id="dev1").values_list("pk", flat=True))


def test_bobs_own_import_is_his_whatever_he_reads(lab, tmp_path):
    """Bob's own file of questions for a dev item no study draws: his record, though his study does
    not draw the item (nor lets him read its questions)."""
    own = _questions(tmp_path, "bob.json", {"Is dev question 1 true?": [
        ["Is bob's own dev rephrase true?", "True", "rephrase"]]}, lab["bob"])

    assert not generalization_questions_for_user(user=lab["bob"]).filter(pk__in=own.summary["question_ids"]).exists()
    assert _sees(lab, "bob", own)


def test_a_record_from_before_question_ids_is_its_importers_unless_the_reader_reads_every_question(lab, tmp_path):
    """Records imported before the importer stored ``question_ids`` (the key is dropped here, as no
    import writes such a record any more) are read beyond their importer only by whoever reads every
    generalization question."""
    readable = _questions(tmp_path, "alice-test.json", {
        "Is test question 0 true?": [["Is a shared test rephrase true?", "True", "rephrase"]]}, lab["alice"])
    for record in (lab["record"], readable):
        record.summary.pop("question_ids")
        record.save(update_fields=["summary"])
    carol, _ = staff_client("carol")  # reads every dataset and generalization question

    assert not {lab["record"], readable} & set(import_records_for_user(user=lab["bob"]))
    assert {lab["record"], readable} <= set(import_records_for_user(user=carol))
    assert {lab["record"], readable} <= set(import_records_for_user(user=lab["alice"]))



def test_the_question_view_permission_without_the_item_one_does_not_read_an_import_of_hidden_items(lab):
    """``studies.view_generalizationquestion`` reads the questions whose item the user may read
    (``generalization_questions_for_user``). Carol holds it but not ``studies.view_item``, and reads
    "shared-ds" only through a view share of Alice's study of its test items: she may not read the
    dev items or their questions, so Alice's record quoting those questions (and their originals)
    is not hers to read either. Before, the question permission alone read every such record. The
    admin's import list must still answer on SQLite (a first rule walked her questions and
    overflowed SQLite's parser)."""
    alice = lab["alice"]
    carol, carol_client = researcher_without_reference_views("carol")
    assert carol.has_perm("studies.view_generalizationquestion") and not carol.has_perm("studies.view_item")
    study = study_create(name="alices-test-study", dataset=lab["dataset"], split="test", owner=alice, user=alice,
                         sources=[RationaleSourceFactory(name="alice-test-src")])
    study_share(study=study, user=alice, with_user=carol)
    assert datasets_for_user(user=carol).filter(pk=lab["dataset"].pk).exists()
    dev = GeneralizationQuestion.objects.filter(item__split="dev")
    assert not generalization_questions_for_user(user=carol).filter(pk__in=dev.values("pk")).exists()

    assert lab["record"] not in import_records_for_user(user=carol)
    assert SECRET not in str(_api(carol_client))
    assert not _admin_lists(carol_client, lab["record"])


def test_the_question_permission_alone_does_not_read_a_record_of_unshown_items_it_may_build_on(lab):
    """The stricter side of that rule, on purpose: Dave (the question permission, not the item one)
    has his own study of the test items, so he may build on "shared-ds" and reads the questions of
    its unshown dev items (``items_for_jobs``), yet not Alice's record of them: the record is checked
    against the questions of items a study he may see draws, a query SQLite can nest (walking his
    questions overflowed its parser). Alice's record is read by its importer as ever."""
    dave, dave_client = researcher_without_reference_views("dave")
    study_create(name="daves-study", dataset=lab["dataset"], split="test", owner=dave,
                 sources=[RationaleSourceFactory(name="dave-src")])
    dev = GeneralizationQuestion.objects.filter(item__split="dev")
    assert generalization_questions_for_user(user=dave).filter(pk__in=dev.values("pk")).count() == dev.count()

    assert lab["record"] not in import_records_for_user(user=dave)
    assert not _admin_lists(dave_client, lab["record"])
    assert lab["record"] in import_records_for_user(user=lab["alice"])
