"""A job is started only on what its researcher may read: ``generation_job_create`` (the one service
the admin's actions, the API and any task call) refuses a source, a dataset, item ids and the
sources its params name (Gen-U's ``answerer_i`` / ``answerer_ir``, Quark's ``policy_path``) that
``sources_for_user``, ``datasets_for_user`` and ``items_for_user`` do not show the acting user, and
answers a hidden one as a missing one. A job copies its source's endpoint, template and
demonstrations and its dataset's train items (with their gold rationales) into its params and runs
on them, so starting one on another researcher's source or dataset would hand them over. The
operator's jobs (a management command: no user) are not concerned."""
from __future__ import annotations

import pytest
from django.urls import reverse

from studies.models import GenerationJob, Item, RationaleSource
from studies.services.generation import GenerationError, generation_job_create
from studies.services.studies import study_create
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import DatasetFactory, ItemFactory

pytestmark = pytest.mark.django_db

SECRET_DEMO = "ALICE-DEMO-RATIONALE"
SECRET_GOLD = "ALICE-GOLD-RATIONALE"


def _lm(name: str, **kw) -> RationaleSource:
    return RationaleSource.objects.create(name=name, kind="lm", backend=kw.pop("backend", "seq2seq"),
                                          model_name_or_path=kw.pop("model", f"/m/{name}"), **kw)


@pytest.fixture
def lab():
    """Alice and Bob hold the apps' model permissions but read only what their studies use. On
    "public-ds" each has a study listing their own source; Alice's private dataset "alice-ds" (six
    train items with gold rationales, two test items) is in her other study only."""
    alice, alice_client = researcher_without_reference_views("alice")
    bob, _ = researcher_without_reference_views("bob")
    public = DatasetFactory(name="public-ds")
    for i in range(2):
        ItemFactory(dataset=public, split="test", external_id=f"pub{i}", gold_answer="yes")
    private = DatasetFactory(name="alice-ds")
    for i in range(6):
        ItemFactory(dataset=private, split="train", external_id=f"tr{i}", gold_answer="yes",
                    gold_rationale=f"{SECRET_GOLD} {i}")
    for i in range(2):
        ItemFactory(dataset=private, split="test", external_id=f"priv{i}", gold_answer="yes")
    alices = _lm("alice-private", backend="openai", model="alice-model", endpoint_url="https://alice.example/v1",
                 demonstrations=[{"question": "Q?", "answer": "yes", "rationale": SECRET_DEMO}] * 6)
    bobs = _lm("bob-lm")
    # Created by the operator (the studies are theirs; this is not what is tested).
    study_create(name="alices-public", dataset=public, sources=[alices], owner=alice, user=None, consent_text="ok")
    study_create(name="alices-private", dataset=private, sources=[alices], owner=alice, user=None,
                 consent_text="ok")
    study_create(name="bobs-public", dataset=public, sources=[bobs], owner=bob, user=None, consent_text="ok")
    return {"alice": alice, "alice_client": alice_client, "bob": bob, "public": public, "private": private,
            "alices": alices, "bobs": bobs}


def _refusal(**kw) -> str:
    with pytest.raises(GenerationError) as refused:
        generation_job_create(enqueue=False, **kw)
    return str(refused.value)


def test_anothers_source_is_refused_and_its_demonstrations_stay_hers(lab):
    said = _refusal(kind="rationales", source=lab["alices"], dataset=lab["public"], split="test", user=lab["bob"])
    assert said == f"no rationale source {lab['alices'].pk} that you may use"
    assert SECRET_DEMO not in said and not GenerationJob.objects.exists()

    job = generation_job_create(kind="rationales", source=lab["bobs"], dataset=lab["public"], split="test",
                                user=lab["bob"], enqueue=False)  # his own source on a dataset he sees
    assert job.created_by == lab["bob"] and job.total == 2


def test_a_hidden_dataset_is_refused_and_its_train_items_stay_hers(lab):
    said = _refusal(kind="rationales", source=lab["bobs"], dataset=lab["private"], split="test", user=lab["bob"])
    assert said == f"no dataset {lab['private'].pk} that you may use"
    said = _refusal(kind="finetune", dataset=lab["private"], user=lab["bob"],
                    params={"mode": "rationalizer", "base_model": "t5-small"})
    assert said == f"no dataset {lab['private'].pk} that you may use"
    assert not GenerationJob.objects.exists()


def test_hidden_item_ids_are_answered_as_missing_ones(lab):
    hidden = list(Item.objects.filter(dataset=lab["private"], split="test").values_list("pk", flat=True))
    missing = [max(Item.objects.values_list("pk", flat=True)) + 1]
    for ids in (hidden, missing):
        said = _refusal(kind="rationales", source=lab["bobs"], item_ids=ids, user=lab["bob"])
        assert said == f"item ids {ids} do not exist"
    # Hidden items mixed into his own are refused too, naming only the hidden ones.
    mine = list(Item.objects.filter(dataset=lab["public"]).values_list("pk", flat=True))
    said = _refusal(kind="rationales", source=lab["bobs"], item_ids=mine + hidden, user=lab["bob"])
    assert said == f"item ids {hidden} do not exist"
    assert not GenerationJob.objects.exists()
    job = generation_job_create(kind="rationales", source=lab["bobs"], item_ids=mine, user=lab["bob"], enqueue=False)
    assert job.dataset == lab["public"] and job.item_ids == sorted(mine)


@pytest.mark.parametrize("role", ["answerer_i", "answerer_ir"])
def test_genu_answerers_another_may_not_read_are_answered_as_missing_ones(lab, role):
    ok = {"answerer_i": lab["bobs"].pk, "answerer_ir": lab["bobs"].pk}
    missing = RationaleSource.objects.order_by("-pk").first().pk + 1
    said = {}
    for name, value in (("hidden", lab["alices"].pk), ("missing", missing)):
        said[name] = _refusal(kind="genu_answers", source=lab["bobs"], dataset=lab["public"], split="test",
                              user=lab["bob"], params={**ok, role: value}).replace(str(value), "ID")
    assert said["hidden"] == said["missing"] == f"params.{role}: no rationale source ID that you may use"
    assert not GenerationJob.objects.exists()


def test_a_quark_policy_named_by_another_researchers_source_reads_as_no_source(lab):
    said = {}
    for name in ("alice-private", "no-such-policy"):
        said[name] = _refusal(kind="quark", dataset=lab["public"], user=lab["bob"],
                              params={"reward": "marker:is", "policy_path": name}).replace(name, "NAME")
    assert said["alice-private"] == said["no-such-policy"]
    assert "neither a rationale source" in said["no-such-policy"]
    assert not GenerationJob.objects.exists()


def test_the_owner_and_the_operator_start_jobs_on_them(lab):
    alice = lab["alice"]
    job = generation_job_create(kind="rationales", source=lab["alices"], dataset=lab["private"], split="test",
                                user=alice, enqueue=False)
    assert job.created_by == alice and job.params["demonstrations"][0]["rationale"] == SECRET_DEMO
    ids = list(Item.objects.filter(dataset=lab["private"], split="test").values_list("pk", flat=True))
    job = generation_job_create(kind="rationales", source=lab["alices"], item_ids=ids, user=alice, enqueue=False)
    assert job.dataset == lab["private"] and job.total == 2
    # The operator (a management command) reads everything, as before.
    job = generation_job_create(kind="rationales", source=lab["alices"], dataset=lab["private"], split="test",
                                user=None, enqueue=False)
    assert job.by_operator


def test_the_admins_action_starts_a_job_for_the_owner(lab):
    url = reverse("admin:studies_rationalesource_changelist")
    body = {"action": "generate_rationales", "_selected_action": [lab["alices"].pk], "apply": "1",
            "dataset": lab["private"].pk, "split": "test", "batch_size": 2}
    lab["alice_client"].post(url, body, follow=True)
    job = GenerationJob.objects.get()
    assert (job.created_by, job.source, job.dataset, job.total) == (lab["alice"], lab["alices"], lab["private"], 2)
