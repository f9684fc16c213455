"""``POST /api/v1/generation-jobs/`` starts a job only on what its researcher may read: the source and
dataset are looked up among ``sources_for_user`` / ``datasets_for_user`` (by name or id), so another
researcher's row is answered exactly as one that does not exist; item ids and the Gen-U answerers
are checked by the job service (``generation_job_create``) with the same answer for hidden and
missing. Nothing of the hidden source (its demonstrations, endpoint, template) or dataset (its train
items' gold rationales) comes back, and no job is made."""
from __future__ import annotations

import pytest

from studies.models import GenerationJob, Item, RationaleSource
from studies.services.studies import study_create
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import DatasetFactory, ItemFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/generation-jobs/"
SECRET_DEMO = "ALICE-DEMO-RATIONALE"
SECRET_GOLD = "ALICE-GOLD-RATIONALE"
SECRET_URL = "https://alice-private.example/v1"


@pytest.fixture
def lab():
    """Alice and Bob (the apps' model permissions, reading only what their studies use): on
    "public-ds" each has a study with their own source; Alice's "alice-ds" (six train items with
    gold rationales, two test items) is in her other study only."""
    alice, _ = researcher_without_reference_views("alice")
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
    alices = RationaleSource.objects.create(
        name="alice-private", kind="lm", backend="openai", model_name_or_path="alice-model", endpoint_url=SECRET_URL,
        demonstrations=[{"question": "Q?", "answer": "yes", "rationale": SECRET_DEMO}] * 6)
    bobs = RationaleSource.objects.create(name="bob-lm", kind="lm", backend="seq2seq", model_name_or_path="/m/bob-t5")
    # Created by the operator: the studies are theirs (how they are made is not what is tested).
    study_create(name="alices-public", dataset=public, sources=[alices], owner=alice, user=None, consent_text="ok")
    study_create(name="alices-private", dataset=private, sources=[alices], owner=alice, user=None,
                 consent_text="ok")
    study_create(name="bobs-public", dataset=public, sources=[bobs], owner=bob, user=None, consent_text="ok")
    return {"alice": alice, "bob": bob, "public": public, "private": private, "alices": alices, "bobs": bobs}


def _post(client, body):
    return client.post(URL, body, format="json")


def _same_for_hidden_and_missing(client, make_body, hidden, missing) -> str:
    said = []
    for value in (hidden, missing):
        response = _post(client, make_body(value))
        assert response.status_code == 400, response.json()
        said.append(response.content.decode().replace(str(value), "X"))
    assert said[0] == said[1]
    for secret in (SECRET_DEMO, SECRET_GOLD, SECRET_URL):
        assert secret not in said[0]
    return said[0]


def test_anothers_source_reads_as_no_source_by_name_and_by_id(client_for, lab):
    client = client_for(lab["bob"])
    missing_id = RationaleSource.objects.order_by("-pk").first().pk + 1
    said = _same_for_hidden_and_missing(
        client, lambda s: {"kind": "rationales", "source": s, "dataset": "public-ds", "split": "test"},
        "alice-private", "no-such-src")
    assert "source" in said and "No rationale source with 'X'" in said
    _same_for_hidden_and_missing(
        client, lambda s: {"kind": "rationales", "source": s, "dataset": "public-ds", "split": "test"},
        lab["alices"].pk, missing_id)
    assert not GenerationJob.objects.exists()


def test_a_hidden_dataset_reads_as_no_dataset_by_name_and_by_id(client_for, lab):
    client = client_for(lab["bob"])
    for kind, extra in (("rationales", {"source": "bob-lm", "split": "test"}),
                        ("finetune", {"params": {"mode": "rationalizer", "base_model": "t5-small"}})):
        said = _same_for_hidden_and_missing(client, lambda d, kind=kind, extra=extra: {"kind": kind, "dataset": d, **extra},
                                            "alice-ds", "no-such-ds")
        assert "dataset" in said
        _same_for_hidden_and_missing(client, lambda d, kind=kind, extra=extra: {"kind": kind, "dataset": d, **extra},
                                     lab["private"].pk, lab["private"].pk + 100)
    assert not GenerationJob.objects.exists()


def test_hidden_item_ids_read_as_missing_ones(client_for, lab):
    client = client_for(lab["bob"])
    hidden = Item.objects.filter(dataset=lab["private"], split="test").order_by("pk").first().pk
    missing = max(Item.objects.values_list("pk", flat=True)) + 1
    said = _same_for_hidden_and_missing(client, lambda i: {"kind": "rationales", "source": "bob-lm", "item_ids": [i]},
                                        hidden, missing)
    assert "do not exist" in said
    assert not GenerationJob.objects.exists()


def test_hidden_genu_answerers_read_as_missing_ones(client_for, lab):
    client = client_for(lab["bob"])
    missing = RationaleSource.objects.order_by("-pk").first().pk + 1
    for role in ("answerer_i", "answerer_ir"):
        def body(value, role=role):
            params = {"answerer_i": lab["bobs"].pk, "answerer_ir": lab["bobs"].pk, role: value}
            return {"kind": "genu_answers", "source": "bob-lm", "dataset": "public-ds", "split": "test",
                    "params": params}
        said = _same_for_hidden_and_missing(client, body, lab["alices"].pk, missing)
        assert f"params.{role}" in said
    assert not GenerationJob.objects.exists()


def test_each_researcher_starts_jobs_on_their_own_source_and_dataset(client_for, lab):
    response = _post(client_for(lab["bob"]), {"kind": "rationales", "source": "bob-lm", "dataset": "public-ds",
                                              "split": "test"})
    assert response.status_code == 202, response.json()
    assert SECRET_DEMO not in response.content.decode()
    response = _post(client_for(lab["alice"]), {"kind": "rationales", "source": "alice-private", "dataset": "alice-ds",
                                                "split": "test"})
    assert response.status_code == 202, response.json()
    assert response.json()["params"]["demonstrations"][0]["rationale"] == SECRET_DEMO  # hers, to her
    assert GenerationJob.objects.filter(created_by=lab["alice"], source=lab["alices"], total=2).exists()
