"""A view share reads the owner's study; it does not let its reader rewrite, re-mark or delete the
owner's generalization questions, rationales or items (``studies.services.content.content_change_problems``:
a row hanging from a dataset, item or source its user may not build on, ``PARENT_SELECTORS``, is not
theirs to change, whatever uses it). Setting a question's validation status needs
``studies.change_generalizationquestion`` (the admin's actions and the service both ask).

Before: a generalization question counted as used only by a generalization, validation or Gen-U
study, so the reader of a utility study shared at VIEW marked its questions invalid (recorded as set
by them), rewrote their text and answer on the change page, and deleted them; a rationale or item no
study uses, of a dataset read only through the view share, was theirs to edit too. And a user with
only the view permission ran the mark actions."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from studies.models import GeneralizationQuestion, Item, Rationale, StudyShare
from studies.services.content import ContentNotYours, content_rows_delete
from studies.services.importers import generalization_questions_import
from studies.services.questions import QuestionError, generalization_questions_set_validation
from studies.services.sharing import study_share
from tests.admin_forms import admin_form_data
from tests.annotations.factories import make_study
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import ItemFactory, RationaleFactory
from tests.studies.helpers import researcher, write_json

pytestmark = pytest.mark.django_db

VALID, INVALID = GeneralizationQuestion.Validation.VALID, GeneralizationQuestion.Validation.INVALID
CHANGELIST = reverse("admin:studies_generalizationquestion_changelist")


def _without(user, *codenames):
    user.user_permissions.remove(*Permission.objects.filter(content_type__app_label="studies", codename__in=codenames))
    return get_user_model().objects.get(pk=user.pk)  # permissions are cached on the instance


@pytest.fixture
def olgas(tmp_path):
    """Olga's draft utility study on her dataset, its items' generalization questions imported by her
    (status valid), and an item of another split, in no study, with her source's rationale."""
    olga, olga_client = staff_client("olga")
    study = make_study(status="draft", n_items=2, n_sources=1, n_genq=0, owner=olga, name="olgas-study")
    item = study.items.order_by("pk").first()
    path = write_json(tmp_path / "generalisation_final_test.json",
                      {item.question: [["Olga's generalization?", "True", "rephrase"]]})
    generalization_questions_import(file=path, dataset_name=study.dataset.name, split="test",
                                    validation_status="valid", user=olga)
    question = GeneralizationQuestion.objects.get(text="Olga's generalization?")
    train = ItemFactory(dataset=study.dataset, split="train", external_id="train-0", question="Olga's train item?")
    rationale = RationaleFactory(item=train, source=study.sources.get(), text="Olga's train rationale.")
    return olga, olga_client, study, question, train, rationale


def _state(obj):
    obj.refresh_from_db()
    if isinstance(obj, GeneralizationQuestion):
        return obj.text, obj.answer, obj.validation_status, obj.metadata
    if isinstance(obj, Rationale):
        return obj.text, obj.faithfulness
    return obj.question, obj.metadata


def _change_url(obj) -> str:
    return reverse(f"admin:studies_{obj._meta.model_name}_change", args=[obj.pk])


def _delete_url(obj) -> str:
    return reverse(f"admin:studies_{obj._meta.model_name}_delete", args=[obj.pk])


def _edit(client, owner_client, obj, **values):
    """Post the change page as the owner's page shows it, with ``values`` changed."""
    data = {**admin_form_data(owner_client.get(_change_url(obj))), **values}
    return client.post(_change_url(obj), data)


def _mark(client, action, question):
    return client.post(CHANGELIST, {"action": action, "_selected_action": [question.pk]}, follow=True)


def test_a_view_share_reader_cannot_mark_edit_or_delete_the_owners_questions(olgas):
    olga, olga_client, study, question, _, _ = olgas
    bob, bob_client = researcher_without_reference_views("bob")
    bob = _without(bob, "view_generalizationquestion")
    study_share(study=study, user=olga, with_user=bob, level=StudyShare.Level.VIEW)
    assert bob_client.get(_change_url(question)).status_code == 200  # reading is what the share grants
    before = _state(question)

    page = _mark(bob_client, "mark_invalid", question).content.decode()
    assert "Nothing marked" in page and f"generalization question {question.pk} is not yours" in page
    assert _state(question) == before

    edited = _edit(bob_client, olga_client, question, text="Rewritten by bob?", answer="no", _save="Save")
    assert edited.status_code == 403
    assert _state(question) == before

    assert bob_client.post(_delete_url(question), {"post": "yes"}).status_code == 403
    bob_client.post(CHANGELIST, {"action": "delete_selected", "_selected_action": [question.pk], "post": "yes"})
    assert _state(question) == before

    # The service gives a script the same answer.
    with pytest.raises(ContentNotYours) as refused:
        generalization_questions_set_validation(user=bob, questions=[question], status=INVALID)
    assert str(refused.value) == (f"generalization question {question.pk} is not yours to edit or delete "
                                  "(item: there is no such item you may use)")
    with pytest.raises(ContentNotYours):
        content_rows_delete(user=bob, model=GeneralizationQuestion, pks=[question.pk])
    assert _state(question) == before


def test_a_view_share_reader_cannot_edit_or_delete_rationales_or_items_of_the_owners_dataset(olgas):
    """A rationale and an item no study uses, read with the models' view permissions, hanging from
    an item, source or dataset the reader reads only through the view share."""
    olga, olga_client, study, _, train, rationale = olgas
    bob, bob_client = researcher_without_reference_views("bob")
    bob.user_permissions.add(*Permission.objects.filter(content_type__app_label="studies",
                                                        codename__in=("view_rationale", "view_item")))
    bob = get_user_model().objects.get(pk=bob.pk)
    study_share(study=study, user=olga, with_user=bob, level=StudyShare.Level.VIEW)

    for obj, values in [(rationale, {"text": "Rewritten by bob."}), (train, {"question": "Rewritten by bob?"})]:
        before = _state(obj)
        assert bob_client.get(_change_url(obj)).status_code == 200
        assert _edit(bob_client, olga_client, obj, **values, _save="Save").status_code == 403
        assert bob_client.post(_delete_url(obj), {"post": "yes"}).status_code == 403
        with pytest.raises(ContentNotYours):
            content_rows_delete(user=bob, model=type(obj), pks=[obj.pk])
        assert _state(obj) == before


def test_a_change_share_collaborator_may_mark_and_edit_the_studys_questions(olgas):
    olga, olga_client, study, question, _, _ = olgas
    carl, carl_client = researcher_without_reference_views("carl")
    carl = _without(carl, "view_generalizationquestion")
    study_share(study=study, user=olga, with_user=carl, level=StudyShare.Level.CHANGE)

    assert "1 question(s) marked invalid" in _mark(carl_client, "mark_invalid", question).content.decode()
    question.refresh_from_db()
    assert question.validation_status == INVALID and question.metadata["validation"]["username"] == "carl"

    edited = _edit(carl_client, olga_client, question, text="Edited by carl?", _save="Save")
    assert edited.status_code == 302
    question.refresh_from_db()
    assert question.text == "Edited by carl?"


def test_a_user_with_only_the_view_permission_cannot_run_the_mark_actions(olgas):
    _, _, _, question, _, _ = olgas
    vera = researcher("vera", "studies.view_study", "studies.view_generalizationquestion")
    client = Client()
    client.force_login(vera)
    before = _state(question)

    listed = client.get(CHANGELIST)
    assert listed.status_code == 200
    form = listed.context.get("action_form")  # None: no action offered at all
    offered = {value for value, _ in form.fields["action"].choices} if form is not None else set()
    assert not offered & {"mark_valid", "mark_invalid", "mark_unvalidated"}
    for action in ("mark_valid", "mark_invalid", "mark_unvalidated"):
        _mark(client, action, question)
    assert _state(question) == before

    with pytest.raises(QuestionError) as refused:
        generalization_questions_set_validation(user=vera, questions=[question], status=INVALID)
    assert "studies.change_generalizationquestion" in str(refused.value)
    assert _state(question) == before


def test_the_owner_still_marks_edits_and_deletes_her_questions(olgas):
    _, olga_client, _, question, _, rationale = olgas

    assert "1 question(s) marked invalid" in _mark(olga_client, "mark_invalid", question).content.decode()
    question.refresh_from_db()
    assert question.validation_status == INVALID and question.metadata["validation"]["username"] == "olga"

    edited = _edit(olga_client, olga_client, question, text="Edited by olga?", answer="no", _save="Save")
    assert edited.status_code == 302
    question.refresh_from_db()
    assert (question.text, question.answer) == ("Edited by olga?", "no")
    assert _edit(olga_client, olga_client, rationale, text="Edited by olga.", _save="Save").status_code == 302

    assert olga_client.post(_delete_url(question), {"post": "yes"}).status_code == 302
    assert not GeneralizationQuestion.objects.filter(pk=question.pk).exists()
    assert olga_client.post(_delete_url(rationale), {"post": "yes"}).status_code == 302
    assert not Rationale.objects.filter(pk=rationale.pk).exists()
    assert Item.objects.filter(external_id="train-0").exists()
