"""What only a study's owner (or a superuser) does, checked in the service that writes and shown
the same way on the study page: make a study owned by someone else (a superuser only), hand a
study to another owner, delete a study (a share, even CHANGE, grants neither); and a study's
dataset and sources are ones its maker may see (``datasets_for_user``, ``sources_for_user``, the
API's choices too), so a draft cannot bring other data's items and rationales into view."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from studies.models import Study, StudyShare
from studies.services.sharing import study_share
from studies.services.studies import StudyError, study_create, study_delete, study_update
from tests.annotations.factories import make_study
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_setup import form_data
from tests.factories import DatasetFactory, ItemFactory, RationaleFactory, RationaleSourceFactory

pytestmark = pytest.mark.django_db

REFERENCE_VIEWS = ("view_dataset", "view_item", "view_rationalesource", "view_rationale")


def reference_data(name: str):
    """A dataset of two test items and a source with a rationale for each."""
    dataset = DatasetFactory(name=f"{name}-ds")
    source = RationaleSourceFactory(name=f"{name}-src")
    for i in range(2):
        RationaleFactory(item=ItemFactory(dataset=dataset, split="test", external_id=f"{name}-{i}"), source=source)
    return dataset, source


def researcher_without_reference_views(username: str):
    """A staff researcher holding the apps' model permissions but not those that read every
    dataset, item, source and rationale: they read only what the studies they may see use."""
    user, client = staff_client(username)
    user.user_permissions.remove(*Permission.objects.filter(content_type__app_label="studies",
                                                            codename__in=REFERENCE_VIEWS))
    return get_user_model().objects.get(pk=user.pk), client


def add_page_data(client, dataset, source, name: str) -> dict:
    data = form_data(client.get(reverse("admin:studies_study_add")))
    data.update({"name": name, "dataset": dataset.pk, "split": "test", "sources": [source.pk], "consent_text": "ok"})
    return data


@pytest.fixture
def bobs_draft():
    """Bob's draft study, shared with Alice at CHANGE; both hold every model permission."""
    bob, bob_client = staff_client("bob")
    alice, alice_client = staff_client("alice")
    study = make_study(status=Study.Status.DRAFT, n_items=2, n_sources=1, owner=bob, name="bobs-draft")
    study_share(study=study, user=bob, with_user=alice, level=StudyShare.Level.CHANGE)
    return study, (bob, bob_client), (alice, alice_client)


# 1. The owner.

def test_a_researcher_adding_a_study_on_the_page_makes_it_their_own(bobs_draft):
    _, (bob, _), (alice, alice_client) = bobs_draft
    dataset, source = reference_data("mine")
    data = {**add_page_data(alice_client, dataset, source, "alices-new"), "owner": bob.pk}
    response = alice_client.post(reverse("admin:studies_study_add"), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Study.objects.get(name="alices-new").owner == alice
    page = alice_client.get(reverse("admin:studies_study_add"))
    assert "owner" not in page.context["adminform"].form.fields  # shown, not chosen


def test_a_superuser_adding_a_study_on_the_page_may_choose_its_owner(admin_client, bobs_draft):
    _, (bob, _), _ = bobs_draft
    dataset, source = reference_data("theirs")
    data = {**add_page_data(admin_client, dataset, source, "for-bob"), "owner": bob.pk}
    assert admin_client.post(reverse("admin:studies_study_add"), data).status_code == 302
    assert Study.objects.get(name="for-bob").owner == bob


def test_the_service_makes_a_study_for_its_user_and_for_another_owner_only_for_a_superuser_or_the_operator(
        bobs_draft, admin_user):
    _, (bob, _), (alice, _) = bobs_draft
    dataset, source = reference_data("svc")
    design = {"dataset": dataset, "sources": [source], "consent_text": "ok"}
    with pytest.raises(StudyError, match="only a superuser creates a study owned by someone else") as refused:
        study_create(name="alice-for-bob", owner=bob, user=alice, **design)
    assert set(refused.value.problems) == {"owner"}
    assert not Study.objects.filter(name="alice-for-bob").exists()
    assert study_create(name="alices-own", user=alice, **design).owner == alice
    assert study_create(name="admin-for-bob", owner=bob, user=admin_user, **design).owner == bob
    assert study_create(name="operator-for-bob", owner=bob, **design).owner == bob  # user None: the operator


def test_the_service_refuses_a_new_study_to_a_user_who_may_not_add_studies(bobs_draft):
    _, _, (alice, _) = bobs_draft
    alice.user_permissions.remove(Permission.objects.get(content_type__app_label="studies", codename="add_study"))
    alice = get_user_model().objects.get(pk=alice.pk)
    dataset, source = reference_data("noadd")
    with pytest.raises(StudyError, match="studies.add_study"):
        study_create(name="no-add", dataset=dataset, sources=[source], user=alice)
    assert not Study.objects.filter(name="no-add").exists()


def test_a_change_share_does_not_take_the_study_over_through_the_service(bobs_draft):
    study, (bob, _), (alice, _) = bobs_draft
    with pytest.raises(StudyError, match="Only the study's owner") as refused:
        study_update(study=Study.objects.get(pk=study.pk), user=alice, owner=alice, reward=Decimal("9.99"))
    assert set(refused.value.problems) == {"owner"}
    study.refresh_from_db()
    assert (study.owner, study.reward) == (bob, Decimal("2.00"))
    # The same owner is no change; the owner hands it on; the operator too.
    study_update(study=study, user=alice, owner=bob, reward=Decimal("3.00"))
    carol, _ = staff_client("carol")
    study_update(study=Study.objects.get(pk=study.pk), user=bob, owner=carol)
    assert Study.objects.get(pk=study.pk).owner == carol
    study_update(study=Study.objects.get(pk=study.pk), user=None, owner=bob)
    assert Study.objects.get(pk=study.pk).owner == bob


def test_the_change_page_refuses_to_hand_a_study_to_an_inactive_account(bobs_draft):
    # Given Bob's draft and Carol's closed account
    study, (bob, bob_client), _ = bobs_draft
    carol, _ = staff_client("carol")
    carol.is_active = False
    carol.save()
    url = reverse("admin:studies_study_change", args=[study.pk])
    # When Bob posts his study page with Carol as its owner
    data = {**form_data(bob_client.get(url)), "owner": carol.pk}
    response = bob_client.post(url, data)
    # Then the page answers with the reason beside the owner field, and Bob keeps the study
    assert response.status_code == 200
    assert "not found or not active" in " ".join(response.context["adminform"].form.errors.get("owner", []))
    assert Study.objects.get(pk=study.pk).owner == bob


# 2. The dataset and the sources.

def test_the_add_page_offers_and_accepts_only_data_the_researcher_may_see(bobs_draft):
    study, _, _ = bobs_draft
    rita, rita_client = researcher_without_reference_views("rita")
    hidden_dataset, hidden_source = reference_data("hidden")
    study_share(study=study, user=study.owner, with_user=rita, level=StudyShare.Level.VIEW)
    seen_dataset, seen_source = study.dataset, study.sources.get()  # a study she may see uses them

    form = rita_client.get(reverse("admin:studies_study_add")).context["adminform"].form
    assert list(form.fields["dataset"].queryset) == [seen_dataset]
    assert list(form.fields["sources"].queryset) == [seen_source]

    refused = rita_client.post(reverse("admin:studies_study_add"),
                               add_page_data(rita_client, hidden_dataset, hidden_source, "ritas-peek"))
    assert refused.status_code == 200
    assert set(refused.context["adminform"].form.errors) == {"dataset", "sources"}
    assert not Study.objects.filter(name="ritas-peek").exists()

    # A view share lets her read that data, not build a study of her own on it (its other splits, and
    # beyond the share): the service refuses it (``studies.services.studies._reference_problems``).
    viewer = rita_client.post(reverse("admin:studies_study_add"),
                              add_page_data(rita_client, seen_dataset, seen_source, "ritas-own"))
    assert viewer.status_code == 200  # the form shows why beside each field (it was a 403 page)
    assert set(viewer.context["adminform"].form.errors) == {"dataset", "sources"}
    assert "you may read it only through a study shared with you that you may only view" in \
        viewer.context["adminform"].form.errors["dataset"][0]
    assert not Study.objects.filter(name="ritas-own").exists()
    # Shared with her to change, the study lends her its data.
    study_share(study=study, user=study.owner, with_user=rita, level=StudyShare.Level.CHANGE)
    done = rita_client.post(reverse("admin:studies_study_add"),
                            add_page_data(rita_client, seen_dataset, seen_source, "ritas-own"))
    assert done.status_code == 302, done.content.decode()[:3000]
    assert Study.objects.get(name="ritas-own").owner == rita


def test_the_services_refuse_a_dataset_or_source_the_user_may_not_see(bobs_draft):
    study, _, _ = bobs_draft
    rita, _ = researcher_without_reference_views("rita")
    hidden_dataset, hidden_source = reference_data("hidden")
    _, unused_source = reference_data("unused")
    own = study_create(name="ritas", dataset=hidden_dataset, sources=[hidden_source], owner=rita)  # the operator
    study_share(study=study, user=study.owner, with_user=rita, level=StudyShare.Level.VIEW)
    other_dataset, other_source = reference_data("other")

    with pytest.raises(StudyError) as refused:
        study_create(name="peek", dataset=other_dataset, sources=[other_source], user=rita)
    assert set(refused.value.problems) == {"dataset", "sources"}
    assert "other-ds" not in str(refused.value) and "other-src" not in str(refused.value)  # named by id only
    assert not Study.objects.filter(name="peek").exists()

    with pytest.raises(StudyError) as refused:
        study_update(study=Study.objects.get(pk=own.pk), user=rita, dataset=other_dataset)
    assert set(refused.value.problems) == {"dataset"}
    with pytest.raises(StudyError) as refused:
        study_update(study=Study.objects.get(pk=own.pk), user=rita, sources=[hidden_source, other_source])
    assert set(refused.value.problems) == {"sources"} and str(other_source.pk) in str(refused.value)
    own.refresh_from_db()
    assert own.dataset == hidden_dataset and list(own.sources.all()) == [hidden_source]

    # A study shared with her only to view lends her nothing to design with; one shared to change does.
    with pytest.raises(StudyError) as refused:
        study_update(study=Study.objects.get(pk=own.pk), user=rita, dataset=study.dataset,
                     sources=[study.sources.get()])
    assert set(refused.value.problems) == {"dataset", "sources"}
    study_share(study=study, user=study.owner, with_user=rita, level=StudyShare.Level.CHANGE)
    # Her own study's source, and a study shared with her to change, she may use.
    study_update(study=Study.objects.get(pk=own.pk), user=rita, dataset=study.dataset,
                 sources=[hidden_source, study.sources.get()])
    with pytest.raises(StudyError):
        study_update(study=Study.objects.get(pk=own.pk), user=rita, sources=[unused_source])
    rita.user_permissions.add(*Permission.objects.filter(content_type__app_label="studies",
                                                         codename__in=REFERENCE_VIEWS))
    rita = get_user_model().objects.get(pk=rita.pk)
    study_update(study=Study.objects.get(pk=own.pk), user=rita, dataset=other_dataset, sources=[other_source])


# 3. Deleting.

def test_a_change_share_does_not_delete_the_owners_draft_on_the_page(bobs_draft):
    study, (_, bob_client), (_, alice_client) = bobs_draft
    delete = reverse("admin:studies_study_delete", args=[study.pk])
    assert alice_client.get(delete).status_code == 403
    assert alice_client.post(delete, {"post": "yes"}).status_code == 403
    alice_client.post(reverse("admin:studies_study_changelist"),
                      {"action": "delete_selected", "_selected_action": [study.pk], "post": "yes"})
    assert Study.objects.filter(pk=study.pk).exists()
    assert delete not in alice_client.get(reverse("admin:studies_study_change", args=[study.pk])).content.decode()
    assert delete in bob_client.get(reverse("admin:studies_study_change", args=[study.pk])).content.decode()

    assert bob_client.post(delete, {"post": "yes"}).status_code == 302
    assert not Study.objects.filter(pk=study.pk).exists()


def test_the_owner_deletes_drafts_by_the_list_action(bobs_draft):
    study, (bob, bob_client), _ = bobs_draft
    second = make_study(status=Study.Status.DRAFT, n_items=2, n_sources=1, owner=bob, name="bobs-second")
    response = bob_client.post(reverse("admin:studies_study_changelist"),
                               {"action": "delete_selected", "_selected_action": [study.pk, second.pk], "post": "yes"})
    assert response.status_code == 302
    assert not Study.objects.filter(pk__in=[study.pk, second.pk]).exists()


def test_study_delete_is_the_owners_and_only_for_a_draft(bobs_draft, admin_user):
    study, (bob, _), (alice, _) = bobs_draft
    with pytest.raises(StudyError, match="not found or not yours to delete") as refused:
        study_delete(study=study, user=alice)
    assert study.name not in str(refused.value)
    bob.user_permissions.remove(Permission.objects.get(content_type__app_label="studies", codename="delete_study"))
    with pytest.raises(StudyError, match="studies.delete_study"):
        study_delete(study=study, user=get_user_model().objects.get(pk=bob.pk))
    assert Study.objects.filter(pk=study.pk).exists()

    opened = make_study(status=Study.Status.OPEN, n_items=2, n_sources=1, owner=bob, name="bobs-open")
    for user in (None, admin_user):
        with pytest.raises(StudyError, match="only a draft study can be deleted"):
            study_delete(study=opened, user=user)
    assert Study.objects.filter(pk=opened.pk).exists()

    study_delete(study=study, user=None)  # the operator
    assert not Study.objects.filter(pk=study.pk).exists()
