"""A question generator is its maker's (``QuestionGenerator.created_by``), read and changed by the rule
of rationale sources (``question_generators_for_user``): library data, all of it read with
``studies.view_questiongenerator``, else only one's own; changed only by its owner (or, when it has
no owner, by whoever reads it). The admin, the API's job start and ``generation_job_create`` ask that
selector, so another researcher's generator (its endpoint, model, instructions, demonstrations)
reads as a missing one. A type without demonstrations gets six drawn when the job is created, for
the job's researcher, only from the train generalization questions and items they may read, into the
job's params: never onto the generator, which may be another's or read by others."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse
from rest_framework.test import APIClient

from studies.api.tokens import api_token_create
from studies.models import GeneralizationQuestion, GenerationJob, Item, QuestionGenerator, RationaleSource
from studies.selectors import CHANGE, VIEW, items_for_user, question_generators_for_user
from studies.services.generation import GenerationError, generation_job_create
from studies.services.studies import study_create
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import DatasetFactory, ItemFactory

pytestmark = pytest.mark.django_db

SECRET_URL = "https://alice-generator.example/v1"
SECRET_INSTRUCTION = "ALICE-SECRET-INSTRUCTION"
LIBRARY_VIEWS = ("view_questiongenerator", "view_generalizationquestion")


def _researcher(name: str, *, library: bool = False):
    """A staff researcher holding the apps' model permissions except those that read every dataset,
    item, source, rationale, generator and generalization question (``library``: with the last two)."""
    user, client = researcher_without_reference_views(name)
    if not library:
        user.user_permissions.remove(*Permission.objects.filter(content_type__app_label="studies",
                                                                codename__in=LIBRARY_VIEWS))
    return get_user_model().objects.get(pk=user.pk), client


def _generator(name: str, owner=None, **kw) -> QuestionGenerator:
    return QuestionGenerator.objects.create(name=name, backend="openai", model_name_or_path=f"{name}-model",
                                            endpoint_url=SECRET_URL, created_by=owner, **kw)


@pytest.fixture
def lab():
    """On one yes/no dataset, 14 train items with a question of each type and 2 dev items: Bob's
    study shows every train item, Alice's a sample of 8; Alice's generator has no demonstrations,
    another has no owner (the operator's, or one from before generators had owners)."""
    alice, alice_client = _researcher("alice")
    bob, bob_client = _researcher("bob")
    dataset = DatasetFactory(name="shared-ds")
    for i in range(14):
        item = ItemFactory(dataset=dataset, split="train", external_id=f"tr{i}", question=f"Is train fact {i} true?",
                           gold_rationale=f"Train fact {i} is true.")
        for qtype in ("rephrase", "similar", "counterfactual"):
            GeneralizationQuestion.objects.create(item=item, qtype=qtype, text=f"Is {qtype} of fact {i} true?",
                                                  answer="yes", origin="import")
    for i in range(2):
        ItemFactory(dataset=dataset, split="dev", external_id=f"dev{i}")
    source = RationaleSource.objects.create(name="lib-src", kind=RationaleSource.Kind.IMPORTED)
    # Created by the operator (how the studies are made is not what is tested).
    study_create(name="alices-train", dataset=dataset, split="train", sources=[source], item_sample_size=8,
                 sample_seed=3, owner=alice, user=None, consent_text="ok")
    study_create(name="bobs-train", dataset=dataset, split="train", sources=[source], owner=bob, user=None,
                 consent_text="ok")
    for owner in (alice, bob):
        study_create(name=f"{owner.username}-dev", dataset=dataset, split="dev", sources=[source], owner=owner,
                     user=None, consent_text="ok")
    alices = _generator("alice-gen", alice, instructions={"rephrase": SECRET_INSTRUCTION})
    return {"alice": alice, "alice_client": alice_client, "bob": bob, "bob_client": bob_client, "dataset": dataset,
            "source": source, "alices": alices, "bobs": _generator("bob-gen", bob), "ownerless": _generator("old-gen")}


def _names(user, access=VIEW) -> set[str]:
    return set(question_generators_for_user(user=user, access=access).values_list("name", flat=True))


def _grant_library(user):
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="studies",
                                                         codename__in=LIBRARY_VIEWS))
    return get_user_model().objects.get(pk=user.pk)


# --- who reads and changes which generator --------------------------------------------------------

def test_each_researcher_reads_and_changes_only_their_own_generator(lab):
    assert _names(lab["alice"]) == _names(lab["alice"], CHANGE) == {"alice-gen"}
    assert _names(lab["bob"]) == _names(lab["bob"], CHANGE) == {"bob-gen"}


def test_the_view_permission_reads_every_generator_but_changes_only_ones_own_and_the_ownerless(lab):
    """As for sources: the library's view permission reads all of them; a row without an owner is
    changed by whoever reads it, another researcher's never."""
    bob = _grant_library(lab["bob"])
    assert _names(bob) == {"alice-gen", "bob-gen", "old-gen"}
    assert _names(bob, CHANGE) == {"bob-gen", "old-gen"}
    bob.user_permissions.remove(Permission.objects.get(codename="change_questiongenerator"))
    assert _names(get_user_model().objects.get(pk=bob.pk), CHANGE) == set()
    root = get_user_model().objects.create_superuser(username="root", password="pw")
    assert _names(root) == _names(root, CHANGE) == {"alice-gen", "bob-gen", "old-gen"}


def test_the_admin_lists_opens_and_changes_only_what_the_selector_allows(lab):
    bob, client = lab["bob"], lab["bob_client"]
    listing = client.get(reverse("admin:studies_questiongenerator_changelist")).content.decode()
    assert "bob-gen" in listing and "alice-gen" not in listing and "old-gen" not in listing
    page = client.get(reverse("admin:studies_questiongenerator_change", args=[lab["alices"].pk]), follow=True)
    assert SECRET_URL not in page.content.decode() and SECRET_INSTRUCTION not in page.content.decode()
    assert "doesn’t exist" in page.content.decode() or page.status_code == 404

    # With the library's view permission he reads hers, read-only: no edit, no delete.
    _grant_library(bob)
    url = reverse("admin:studies_questiongenerator_change", args=[lab["alices"].pk])
    assert client.get(url).status_code == 200
    assert client.post(url, {"name": "taken-over", "backend": "openai", "model_name_or_path": "x",
                             "endpoint_url": "https://bob.example/v1"}).status_code == 403
    delete = reverse("admin:studies_questiongenerator_delete", args=[lab["alices"].pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    lab["alices"].refresh_from_db()
    assert (lab["alices"].name, lab["alices"].endpoint_url) == ("alice-gen", SECRET_URL)


def test_a_generator_added_on_the_admin_page_is_its_makers(lab):
    response = lab["bob_client"].post(reverse("admin:studies_questiongenerator_add"), {
        "name": "bob-new", "backend": "seq2seq", "model_name_or_path": "/m/bob", "seed": 0,
        "instructions": "{}", "demonstrations": "{}", "decoding": "{}"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert QuestionGenerator.objects.get(name="bob-new").created_by == lab["bob"]


# --- starting a job on one ------------------------------------------------------------------------

def test_a_job_on_another_researchers_generator_is_refused_by_the_service(lab):
    with pytest.raises(GenerationError) as refused:
        generation_job_create(kind="generalization_questions", generator=lab["alices"], dataset=lab["dataset"],
                              split="dev", user=lab["bob"], enqueue=False)
    assert str(refused.value) == f"no question generator {lab['alices'].pk} that you may use"
    assert not GenerationJob.objects.exists()


def test_the_api_answers_another_researchers_generator_as_a_missing_one(lab):
    _, key = api_token_create(user=lab["bob"], name="t", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    missing_id = QuestionGenerator.objects.order_by("-pk").first().pk + 1
    for hidden, missing in (("alice-gen", "no-such-gen"), (lab["alices"].pk, missing_id)):
        said = []
        for value in (hidden, missing):
            response = client.post("/api/v1/generation-jobs/", {"kind": "generalization_questions", "generator": value,
                                                                "dataset": "shared-ds", "split": "dev"}, format="json")
            assert response.status_code == 400, response.json()
            said.append(response.content.decode().replace(str(value), "X"))
        assert said[0] == said[1] and "generator" in said[0] and SECRET_URL not in said[0]
    assert not GenerationJob.objects.exists()


# --- the demonstrations a job draws ---------------------------------------------------------------

def _drawn_items(job) -> set[str]:
    questions = {d["question"] for demos in job.params["demonstrations"].values() for d in demos}
    return set(Item.objects.filter(question__in=questions).values_list("external_id", flat=True))


def _readable_train(user) -> set[str]:
    return set(items_for_user(user=user).filter(split="train").values_list("external_id", flat=True))


def test_a_job_draws_demonstrations_only_from_what_its_researcher_reads_and_saves_none_on_the_generator(lab):
    alice = lab["alice"]
    alices_items = _readable_train(alice)
    assert len(alices_items) == 8

    job = generation_job_create(kind="generalization_questions", generator=lab["alices"], dataset=lab["dataset"],
                                split="dev", user=alice, enqueue=False)

    assert all(len(job.params["demonstrations"][t]) == 6 for t in ("rephrase", "similar", "counterfactual"))
    drawn = _drawn_items(job)
    assert drawn and drawn <= alices_items, drawn - alices_items
    assert job.params["demonstrations_from"]["similar"].startswith(
        "drawn from the train-split similar generalization questions of shared-ds that alice, who started the job, "
        "may read (generalization_questions_for_user, items_for_jobs)")
    lab["alices"].refresh_from_db()
    assert lab["alices"].demonstrations == {}


def test_a_job_on_a_generator_its_researcher_may_not_change_writes_nothing_onto_it(lab):
    """Bob reads Alice's generator (the library's view permission) and starts a job on it: what he
    draws (from items Alice may not read) stays in his job, and her generator is as she left it."""
    bob = _grant_library(lab["bob"])
    job = generation_job_create(kind="generalization_questions", generator=lab["alices"], dataset=lab["dataset"],
                                split="dev", user=bob, enqueue=False)
    assert job.created_by == bob and len(job.params["demonstrations"]["rephrase"]) == 6
    lab["alices"].refresh_from_db()
    assert lab["alices"].demonstrations == {}
    assert "bob, who started the job" in job.params["demonstrations_from"]["rephrase"]


def test_a_generators_own_demonstrations_are_used_and_the_operator_draws_from_everything(lab):
    own = [{"question": "Q?", "output": "Own?", "answer": "True", "context": "c"}] * 6
    lab["ownerless"].demonstrations = {"rephrase": own}
    lab["ownerless"].save()
    job = generation_job_create(kind="generalization_questions", generator=lab["ownerless"], dataset=lab["dataset"],
                                split="dev", user=None, enqueue=False)
    assert job.params["demonstrations"]["rephrase"] == own
    assert job.params["demonstrations_from"]["rephrase"] == "the question generator's own demonstrations"
    assert job.params["demonstrations_from"]["counterfactual"] == (
        "drawn from the train-split counterfactual generalization questions of shared-ds (the operator's job: all of "
        "them); 6 of the six are unvalidated questions (LM output no one has validated yet: only questions marked "
        "invalid are left out of the draw)")
    lab["ownerless"].refresh_from_db()
    assert set(lab["ownerless"].demonstrations) == {"rephrase"}


def test_a_researcher_who_reads_too_few_train_questions_is_refused_before_any_job(lab):
    carol, _ = _researcher("carol")
    study_create(name="carols-dev", dataset=lab["dataset"], split="dev", sources=[lab["source"]], owner=carol,
                 user=None, consent_text="ok")
    mine = _generator("carol-gen", carol)
    with pytest.raises(GenerationError, match="questions that the job's researcher may read to draw six from"):
        generation_job_create(kind="generalization_questions", generator=mine, dataset=lab["dataset"], split="dev",
                              user=carol, enqueue=False)
    assert not GenerationJob.objects.exists()
    mine.refresh_from_db()
    assert mine.demonstrations == {}
