"""A view share lets its reader read the study, not build studies of their own on its reference data.

Before: a dataset or source the reader saw only because a study shared with them for viewing used it
was accepted in a study of their own (``study_insert``), and ``study_update`` checked only a new
dataset, not a new split, sample or seed. The reader then read the owner's items and rationales of
other splits, kept reading them through their own draft once the share was revoked, and that draft
froze the owner's content. Now a design uses only reference data its user reads with the model's
view permission, or that a study they may change uses (their own, or one shared at change level);
a study being changed does not vouch for itself when it is the user's own."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from studies.api.tokens import api_token_create
from studies.models import Study, StudyShare
from studies.selectors import items_for_user, rationales_for_user
from studies.services.sharing import study_share, study_unshare
from studies.services.studies import StudyError, study_create, study_update
from tests.annotations.factories import make_study
from tests.factories import ItemFactory, RationaleFactory

pytestmark = pytest.mark.django_db
RESEARCHER = ("studies.add_study", "studies.view_study", "studies.change_study")


def _user(name, *perms):
    user = get_user_model().objects.create_user(username=name, password="pw-" + name, is_staff=True)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return get_user_model().objects.get(pk=user.pk)  # permissions are cached on the instance


def _client(user):
    _, key = api_token_create(user=user, name="t", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def shared():
    """Olga's study of the test split of her dataset, with one source; the train split (6 items, each
    with a rationale of that source) is in no study."""
    owner = _user("olga", *RESEARCHER)
    study = make_study(n_items=4, n_sources=1, status="open", owner=owner, name="olgas-study")
    dataset, source = study.dataset, study.sources.get()
    for i in range(6):
        item = ItemFactory(dataset=dataset, split="train", external_id=f"train-{i}", question=f"Train question {i}?")
        RationaleFactory(item=item, source=source, text=f"Train rationale {i}.")
    return owner, study, dataset, source


def _design(dataset, source, **overrides):
    return {"name": "rex-copy", "kind": "utility", "dataset": dataset.name, "split": "train",
            "sources": [source.name], "consent_text": "I agree.", **overrides}


def test_a_view_share_does_not_let_its_reader_build_a_study_on_its_data(shared):
    owner, study, dataset, source = shared
    reader = _user("rex", *RESEARCHER)
    study_share(study=study, user=owner, with_user=reader, level=StudyShare.Level.VIEW)
    client = _client(reader)
    assert client.get(f"/api/v1/studies/{study.pk}/").status_code == 200  # reading is what the share grants
    readable_items = set(items_for_user(user=reader).values_list("pk", flat=True))

    response = client.post("/api/v1/studies/", _design(dataset, source), format="json")

    assert response.status_code == 400, response.content
    body = response.json()
    assert set(body) == {"dataset", "sources"}, body
    assert (f"Dataset {dataset.pk} {dataset.name!r}: you may read it only through a study shared with you that you "
            "may only view") in body["dataset"][0]
    assert f"Rationale source(s) {source.pk} {source.name!r}" in body["sources"][0]
    assert "shared with you that you may only view" in body["sources"][0]
    assert not Study.objects.filter(name="rex-copy").exists()
    # The reader reads what the shared study shows, nothing of the train split.
    assert set(items_for_user(user=reader).values_list("pk", flat=True)) == readable_items
    assert not rationales_for_user(user=reader).filter(item__split="train").exists()

    # The test split, the shared study's own items, is refused too: what outlasts a share is the point.
    with pytest.raises(StudyError) as refused:
        study_create(name="rex-test", dataset=dataset, split="test", sources=[source], owner=reader, user=reader)
    assert set(refused.value.problems) == {"dataset", "sources"}

    # Revoked, the reader reads none of it: no study of theirs keeps it in view.
    study_unshare(study=study, user=owner, with_user=reader)
    assert client.get(f"/api/v1/datasets/{dataset.pk}/").status_code == 404
    assert not items_for_user(user=reader).exists()


def test_a_reader_who_does_not_see_the_data_at_all_gets_its_id_only(shared):
    _, _, dataset, source = shared
    stranger = _user("sid", *RESEARCHER)
    response = _client(stranger).post("/api/v1/studies/", _design(dataset, source), format="json")
    # The API's choices are what the user may read: an unknown name, as before.
    assert response.status_code == 400 and "dataset" in response.json()
    with pytest.raises(StudyError) as refused:
        study_create(name="sid-copy", dataset=dataset, split="train", sources=[source], owner=stranger,
                     user=stranger)
    assert refused.value.problems["dataset"].startswith(f"Dataset {dataset.pk}: not found or not yours to use")
    assert dataset.name not in str(refused.value)
    assert source.name not in str(refused.value)


def test_a_change_share_lets_its_collaborator_design_a_study_on_its_data(shared):
    owner, study, dataset, source = shared
    collaborator = _user("cora", *RESEARCHER)
    study_share(study=study, user=owner, with_user=collaborator, level=StudyShare.Level.CHANGE)

    response = _client(collaborator).post("/api/v1/studies/", _design(dataset, source, name="cora-pilot"),
                                          format="json")

    assert response.status_code == 201, response.content
    mine = Study.objects.get(pk=response.json()["id"])
    assert mine.owner_id == collaborator.pk and mine.items.count() == 6


def test_the_model_view_permissions_still_let_a_researcher_use_any_data(shared):
    _, _, dataset, source = shared
    reader = _user("vera", *RESEARCHER, "studies.view_dataset", "studies.view_rationalesource")
    response = _client(reader).post("/api/v1/studies/", _design(dataset, source, name="vera-study"), format="json")
    assert response.status_code == 201, response.content


def test_a_draft_made_while_its_reader_could_change_the_shared_study_stays_theirs(shared):
    """What a collaborator designed while the owner let them change the shared study stays theirs to
    redraw after the share is lowered or revoked (README: a collaborator's own study outlives the
    share); a view share alone never let them make it."""
    owner, study, dataset, source = shared
    reader = _user("rex", *RESEARCHER)
    study_share(study=study, user=owner, with_user=reader, level=StudyShare.Level.CHANGE)
    draft = study_create(name="rex-pilot", dataset=dataset, split="test", sources=[source], owner=reader,
                         user=reader, consent_text="I agree.")
    study_unshare(study=study, user=owner, with_user=reader)
    study_update(study=draft, user=reader, item_sample_size=3)
    assert Study.objects.get(pk=draft.pk).items.count() == 3


def test_a_new_source_on_a_draft_is_checked_alone(shared):
    owner, study, dataset, source = shared
    reader = _user("rex", *RESEARCHER, "studies.view_dataset")
    other = make_study(n_items=2, n_sources=1, status="open", owner=owner, name="olgas-other")
    hidden_from_design = other.sources.get()
    study_share(study=other, user=owner, with_user=reader, level=StudyShare.Level.VIEW)
    draft = study_create(name="rex-own", dataset=other.dataset, split="test", sources=[], kind="question_validation",
                         owner=reader, user=reader, consent_text="I agree.")
    with pytest.raises(StudyError) as refused:
        study_update(study=draft, user=reader, sources=[hidden_from_design])
    assert set(refused.value.problems) == {"sources"}
    assert f"Rationale source(s) {hidden_from_design.pk} {hidden_from_design.name!r}" in refused.value.problems["sources"]


def test_a_change_share_still_changes_the_shared_study_itself(shared):
    owner, _, dataset, source = shared
    draft = make_study(n_items=4, n_sources=1, status="draft", owner=owner, name="olgas-draft")
    collaborator = _user("cora", *RESEARCHER)
    study_share(study=draft, user=owner, with_user=collaborator, level=StudyShare.Level.CHANGE)
    study_update(study=draft, user=collaborator, item_sample_size=2, sample_seed=3)
    assert draft.items.count() == 2
