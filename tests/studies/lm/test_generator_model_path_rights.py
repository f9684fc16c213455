"""A question generator's ``model_name_or_path`` is a model every job on it loads, so it follows the
rule a rationale source's path does (``model_paths.source_model_path_problem``, asked by the admin's
generator form): a researcher may not point a generator at another researcher's checkpoint folder.
A generator is library data others may read, so ``generation_job_inputs_check`` asks the same rule
(``model_paths.model_path_readable``) of the generator's model for the job's researcher, when the
job is created and whenever it runs (``generation_job_inputs_refusal``): a generator pointed at a
checkpoint before the rule, or by the operator, is no way into it. A hub name, the operator's model
and the researcher's own checkpoint stay allowed."""
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from studies.models import GenerationJob, QuestionGenerator, RationaleSource
from studies.services.generation import GenerationError, generation_job_create
from studies.services.generation.jobs import generation_job_inputs_refusal
from studies.services.generation.lifecycle import model_folder
from studies.services.studies import study_create
from tests.api.conftest import grant
from tests.factories import DatasetFactory, ItemFactory

from .test_job_rights import _train_pool

pytestmark = pytest.mark.django_db
# Starts jobs and keeps generators; reads every dataset, item and generator, but only the sources
# of the studies they may see (no studies.view_rationalesource).
RESEARCHER = ("studies.view_generationjob", "studies.add_generationjob", "studies.add_study", "studies.view_dataset",
              "studies.view_item", "studies.view_questiongenerator", "studies.add_questiongenerator",
              "studies.change_questiongenerator")
DEMOS = {qtype: [{"question": "Q?", "context": "c", "output": "Is it?", "answer": "True"}] * 6
         for qtype in ("rephrase", "similar", "counterfactual")}


def researcher(name):
    user = grant(get_user_model().objects.create_user(username=name, password="pw", is_staff=True), *RESEARCHER)
    client = Client()
    client.force_login(user)
    return user, client


@pytest.fixture
def lab():
    """Alice's fine-tuned checkpoint ``alices-t5`` (its weights in ``RL_MODEL_DIR/alices-t5``), a
    source listed only by her study; Bob; a dataset both may read."""
    (alice, alice_client), (bob, bob_client) = researcher("alice"), researcher("bob")
    dataset = DatasetFactory(name="shared-ds")
    _train_pool(dataset)
    for _ in range(2):
        ItemFactory(dataset=dataset, split="dev")
    folder = model_folder("alices-t5")
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    source = RationaleSource.objects.create(name="alices-t5", kind="lm", backend="seq2seq",
                                            model_name_or_path=str(folder))
    study_create(name="alices-study", dataset=dataset, split="train", sources=[source], owner=alice)
    return {"alice": alice, "alice_client": alice_client, "bob": bob, "bob_client": bob_client,
            "dataset": dataset, "folder": folder}


def _form(name, model):
    return {"name": name, "backend": "seq2seq", "model_name_or_path": model, "seed": 0, "instructions": "{}",
            "demonstrations": "{}", "decoding": "{}"}


def _job(lab, user, generator):
    return generation_job_create(kind="generalization_questions", generator=generator, dataset=lab["dataset"],
                                 split="dev", user=user, enqueue=False)


# --- saving a generator in the admin ----------------------------------------------------------------

def test_bob_may_not_save_a_generator_naming_alices_checkpoint_folder(lab):
    add = reverse("admin:studies_questiongenerator_add")
    for n, path in enumerate((lab["folder"], lab["folder"] / "config.json")):
        page = lab["bob_client"].post(add, _form(f"bobs-{n}", str(path)))
        assert page.status_code == 200  # the form again, with the error beside the field
        assert f"no model {str(path)!r} that you may use".replace("'", "&#x27;") in page.content.decode()
    assert not QuestionGenerator.objects.exists()

    # Nor edit his own generator onto it.
    assert lab["bob_client"].post(add, _form("bobs", "google/flan-t5-small")).status_code == 302
    mine = QuestionGenerator.objects.get(name="bobs")
    page = lab["bob_client"].post(reverse("admin:studies_questiongenerator_change", args=[mine.pk]),
                                  _form("bobs", str(lab["folder"])))
    assert page.status_code == 200 and "that you may use" in page.content.decode()
    mine.refresh_from_db()
    assert mine.model_name_or_path == "google/flan-t5-small"


def test_alice_saves_a_generator_on_her_own_checkpoint_and_anyone_on_a_hub_name_or_a_new_folder(lab):
    add = reverse("admin:studies_questiongenerator_add")
    assert lab["alice_client"].post(add, _form("alices", str(lab["folder"]))).status_code == 302
    assert lab["bob_client"].post(add, _form("hub", "google/flan-t5-small")).status_code == 302
    assert lab["bob_client"].post(add, _form("later", str(model_folder("bobs-next")))).status_code == 302
    # kept relative to RL_MODEL_DIR, as sources' folders are: it follows the folder to another host
    assert QuestionGenerator.objects.get(name="alices").model_name_or_path == "models:alices-t5"


# --- a job on a generator: the same rule for the job's researcher -----------------------------------

def test_a_generator_naming_alices_checkpoint_cannot_be_used_in_bobs_job(lab):
    # Made through the ORM only to stand for legacy data: a generator the operator pointed at the
    # folder, or one saved before the admin asked the rule. Bob reads it (the view permission).
    legacy = QuestionGenerator.objects.create(name="legacy", backend="seq2seq",
                                              model_name_or_path=str(lab["folder"]), demonstrations=DEMOS)
    with pytest.raises(GenerationError) as refused:
        _job(lab, lab["bob"], legacy)
    assert str(refused.value) == (f"question generator {legacy.pk}: no model {str(lab['folder'])!r} that you may "
                                  "use (a model folder or .gguf file that exists, or a hub name)")
    assert not GenerationJob.objects.exists()
    # Alice, whose checkpoint it is, uses it.
    assert _job(lab, lab["alice"], legacy).created_by == lab["alice"]


def test_a_generator_pointed_at_alices_checkpoint_after_bobs_job_started_stops_it(lab):
    generator = QuestionGenerator.objects.create(name="op-gen", backend="seq2seq", model_name_or_path="t5-small",
                                                 demonstrations=DEMOS)
    job = _job(lab, lab["bob"], generator)
    assert generation_job_inputs_refusal(job) == ""
    # The operator (ORM, as a legacy edit) points it at her folder: Bob's job may not load it.
    generator.model_name_or_path = str(lab["folder"])
    generator.save()
    job.refresh_from_db()
    assert "no model" in generation_job_inputs_refusal(job) and str(lab["folder"]) in generation_job_inputs_refusal(job)


def test_hub_names_and_the_operators_model_stay_usable(lab, settings, tmp_path):
    gguf = tmp_path / "demo" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    settings.RL_DEMO_LM_GGUF = gguf
    for n, model in enumerate(("google/flan-t5-small", str(gguf))):
        generator = QuestionGenerator.objects.create(name=f"g{n}", backend="seq2seq", model_name_or_path=model,
                                                     demonstrations=DEMOS)
        assert _job(lab, lab["bob"], generator).generator == generator
