"""A fine-tuning or Quark job registers its checkpoint under ``output_name``: an existing LM source of
that name gets the job's model. Whose source it may be is the shared content rule's answer
(``studies.services.content``), asked for the researcher the job acts for when it is created (the
admin, the API and the commands all create through ``generation_job_create``) and again before it
publishes the checkpoint: a source that another researcher's study lists is not theirs to replace."""
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from studies.api.tokens import api_token_create
from studies.models import GenerationJob, RationaleSource
from studies.services.generation import GenerationError, generation_job_create, generation_job_run
from studies.services.generation.lifecycle import model_folder, model_source_register
from studies.services.studies import study_create
from tests.api.conftest import grant

from .conftest import make_items

pytestmark = pytest.mark.django_db
RESEARCHER = ("studies.view_generationjob", "studies.add_generationjob", "studies.add_study", "studies.change_study",
              "studies.view_dataset", "studies.view_item", "studies.view_rationalesource")
REFUSED = "output_name 'bobs-t5' is an existing source this job may not replace"


def researcher(name):
    return grant(get_user_model().objects.create_user(username=name, password="pw"), *RESEARCHER)


@pytest.fixture
def world(strategyqa_dataset, strategyqa_train_rows, strategyqa_dev_rows):
    """Alice and Bob, researchers; the LM source ``bobs-t5`` whose checkpoint folder is the one a job
    named so would publish to, and a function that has Bob's study list it."""
    make_items(strategyqa_dataset, strategyqa_train_rows[:8], "train")
    make_items(strategyqa_dataset, strategyqa_dev_rows[:4], "dev")
    make_items(strategyqa_dataset, strategyqa_dev_rows[4:8], "test")
    alice, bob = researcher("alice"), researcher("bob")
    folder = model_folder("bobs-t5")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("bob's model")
    source = RationaleSource.objects.create(name="bobs-t5", kind="lm", backend="seq2seq", model_name_or_path=str(folder),
                                            description="Bob's answerer", decoding={"max_new_tokens": 8})

    def bobs_study_lists_it():
        return study_create(name="bobs-study", dataset=strategyqa_dataset, split="dev", sources=[source], owner=bob)

    return alice, bob, source, bobs_study_lists_it


def _job(kind, dataset, user, **params):
    """A new job of ``kind`` (fine-tuning an answerer, or Quark on a marker reward) for ``user``."""
    source = None
    if kind == "finetune":
        params = {"mode": "answer_i", "base_model": "t5-base", **params}
    else:
        source, _ = RationaleSource.objects.get_or_create(name="t5 policy", kind="lm", backend="seq2seq",
                                                          model_name_or_path="t5-base")
        params = {"reward": "marker:is", **params}
    return generation_job_create(kind=kind, source=source, dataset=dataset, user=user, enqueue=False, params=params)


def _unchanged(source):
    fresh = RationaleSource.objects.get(pk=source.pk)
    assert (fresh.model_name_or_path, fresh.backend, fresh.description, fresh.decoding, fresh.training) == (
        source.model_name_or_path, source.backend, source.description, source.decoding, source.training)
    assert (model_folder("bobs-t5") / "config.json").read_text() == "bob's model"
    assert sorted(p.name for p in model_folder("bobs-t5").parent.iterdir() if p.name.startswith("bobs-t5")) == [
        "bobs-t5"]  # no partial or old copy beside it


@pytest.mark.parametrize("kind", ["finetune", "quark"])
def test_a_researcher_cannot_start_training_into_a_source_another_researchers_study_lists(world, strategyqa_dataset,
                                                                                           kind):
    alice, bob, source, bobs_study_lists_it = world
    bobs_study_lists_it()
    with pytest.raises(GenerationError, match=REFUSED) as refused:
        _job(kind, strategyqa_dataset, alice, output_name="bobs-t5")
    assert f"rationale source {source.pk} is used by a study you may not change" in str(refused.value)
    assert "bobs-study" not in str(refused.value)  # another researcher's study name is theirs
    assert not GenerationJob.objects.filter(created_by=alice).exists()
    _unchanged(source)
    # Bob's own study does not stop Bob, nor the operator (a command's job); a free name is Alice's.
    for user in (bob, None):
        _job(kind, strategyqa_dataset, user, output_name="bobs-t5")
    _job(kind, strategyqa_dataset, alice, output_name="alices-t5")


def test_the_api_refuses_it_too(world, strategyqa_dataset):
    alice, _, source, bobs_study_lists_it = world
    bobs_study_lists_it()
    _, key = api_token_create(user=alice, name="test", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    response = client.post("/api/v1/generation-jobs/", {
        "kind": "finetune", "dataset": strategyqa_dataset.name, "params": {"mode": "answer_i", "base_model": "t5-base", "output_name": "bobs-t5"}},
        format="json")
    assert response.status_code == 400
    assert REFUSED in response.json()["non_field_errors"][0]
    _unchanged(source)


def test_the_admin_fine_tuning_action_refuses_it_too(world, strategyqa_dataset):
    alice, _, source, bobs_study_lists_it = world
    bobs_study_lists_it()
    alice.is_staff = True
    alice.save()
    grant(alice, "studies.view_dataset", "studies.change_dataset")
    client = Client()
    client.force_login(alice)
    page = client.post(reverse("admin:studies_dataset_changelist"), {
        "action": "finetune_on_dataset", "_selected_action": [strategyqa_dataset.pk], "apply": "1", "mode": "answer_i",
        "preset": "paper-answerers", "base_model": "t5-base", "split": "train", "output_name": "bobs-t5"}, follow=True)
    assert any(REFUSED in str(m) for m in page.context["messages"])
    assert not GenerationJob.objects.exists()
    _unchanged(source)


def test_the_register_refuses_a_source_that_became_another_researchers_meanwhile(world):
    # What the run registers through: checked for the job's researcher under a lock, beside the write.
    alice, bob, source, bobs_study_lists_it = world
    bobs_study_lists_it()
    with pytest.raises(GenerationError, match=REFUSED):
        model_source_register(name="bobs-t5", backend="causal", folder=model_folder("alices-t5"), user=alice,
                              description="Alice's model")
    _unchanged(source)
    assert model_source_register(name="bobs-t5", backend="seq2seq", folder=model_folder("bobs-t5"), user=bob,
                                 description="Bob's retrained answerer").description == "Bob's retrained answerer"


@pytest.mark.lm
def test_a_fine_tuning_job_whose_name_became_another_researchers_fails_without_replacing_it(
        world, strategyqa_dataset, lm_models):
    pytest.importorskip("torch")
    alice, _, source, bobs_study_lists_it = world
    job = _job("finetune", strategyqa_dataset, alice, base_model=str(lm_models["t5"]), steps=2, batch_size=2,
               output_name="bobs-t5")  # no study lists it yet: allowed
    bobs_study_lists_it()  # while the job waits or trains
    with pytest.raises(GenerationError, match=REFUSED):
        generation_job_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == "failed" and REFUSED in job.error
    assert "output_source_id" not in job.params
    _unchanged(source)
