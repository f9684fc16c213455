"""A fine-tuning or Quark job publishes its checkpoint to ``model_folder(output_name)``, a folder of
``RL_MODEL_DIR`` named by the output name's slug, and publishing deletes what was there. So the
output name is checked for the folder, not only for the source of that exact name
(``lifecycle.output_name_check``, at creation and again right before publishing): a name whose
folder is another source's, Quark's runs, a hidden or scratch folder, the model directory itself
or an operator's model is refused, naming ``output_name`` and why."""
import pytest
from django.contrib.auth import get_user_model

from studies.models import RationaleSource
from studies.services.generation import GenerationError, generation_job_create
from studies.services.generation.lifecycle import model_folder, model_source_register, output_name_check
from studies.services.model_paths import model_location
from studies.services.studies import study_create
from tests.api.conftest import grant
from tests.factories import DatasetFactory

from .test_job_rights import _train_pool

pytestmark = pytest.mark.django_db
RESEARCHER = ("studies.view_generationjob", "studies.add_generationjob", "studies.add_study", "studies.change_study",
              "studies.view_dataset", "studies.view_item")
TAKEN = "is already taken by another model: pick another output_name"
RESERVED = "is one the lab keeps for itself"


def researcher(name, *extra):
    return grant(get_user_model().objects.create_user(username=name, password="pw", is_staff=True),
                 *RESEARCHER, *extra)


@pytest.fixture
def dataset():
    ds = DatasetFactory(name="alices")
    _train_pool(ds)
    return ds


def finetune(dataset, user, output_name):
    return generation_job_create(kind="finetune", dataset=dataset, split="train", user=user, enqueue=False,
                                 params={"mode": "rationalizer", "base_model": "t5-small", "output_name": output_name})


def bobs_source(dataset, bob):
    """Bob's private fine-tuned source, listed by his study, with its weights in ``bobs-t5``."""
    folder = model_folder("bobs-t5")
    folder.mkdir()
    (folder / "weights.bin").write_text("bob")
    source = RationaleSource.objects.create(name="bobs-t5", kind="lm", backend="seq2seq",
                                            model_name_or_path=str(folder))
    study_create(name="bobs-study", dataset=dataset, split="train", sources=[source], owner=bob)
    return source, folder


@pytest.mark.parametrize("name", ["bobs t5", "bobs/t5", " bobs-t5"])
def test_a_name_whose_folder_is_another_researchers_source_is_refused(dataset, name):
    alice, bob = researcher("alice"), researcher("bob")
    _, folder = bobs_source(dataset, bob)
    with pytest.raises(GenerationError, match=f"output_name {name!r}: its model folder 'bobs-t5' {TAKEN}"):
        finetune(dataset, alice, name)
    assert (folder / "weights.bin").read_text() == "bob"


def test_a_hidden_sources_folder_gets_the_answer_of_any_taken_folder(dataset):
    """Alice cannot read Bob's source (no view permission, not in her studies); the folder it reads
    and a folder nothing registered are refused alike, naming no source and no researcher."""
    alice = researcher("alice")
    bobs_source(dataset, researcher("bob"))
    model_folder("stray").mkdir()  # a folder no source reads (left by hand, or a crashed run)
    answers = []
    for name in ("bobs t5", "stray!"):
        with pytest.raises(GenerationError) as refused:
            finetune(dataset, alice, name)
        answers.append(str(refused.value).replace(repr(name), "N").replace("bobs-t5", "F").replace("stray", "F"))
    assert answers[0] == answers[1]
    assert "bob" not in answers[0]


def test_a_source_reading_a_model_under_the_folder_takes_it(dataset):
    """A source whose model is a file in the folder (a GGUF) holds the folder, even while it is missing."""
    alice = researcher("alice")
    RationaleSource.objects.create(name="ggufs", kind="lm", backend="causal",
                                   model_name_or_path=str(model_folder("ggufs") / "m.Q4_1.gguf"))
    with pytest.raises(GenerationError, match=TAKEN):
        finetune(dataset, alice, "ggufs!")


@pytest.mark.parametrize("name", [".", "..", ".hidden", "quark-runs", "quark runs", "x.partial", "x.job7.partial",
                                  "x.old", "bobs-t5.old"])
def test_reserved_and_hidden_folders_are_refused(dataset, name):
    runs = model_folder("quark-runs") / "job7" / "last"
    runs.mkdir(parents=True)
    with pytest.raises(GenerationError, match=f"output_name {name!r}: its model folder .* {RESERVED}"):
        finetune(dataset, researcher("alice"), name)
    assert runs.exists()


def test_an_operator_models_folder_is_refused_even_before_it_is_fetched(dataset, settings):
    settings.RL_DEMO_LM_GGUF = model_folder("SmolLM2-135M-Instruct") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    settings.RL_SIMILARITY_MODEL = str(model_folder("roberta-large"))
    alice = researcher("alice")
    for name in ("SmolLM2-135M-Instruct", "roberta-large"):
        with pytest.raises(GenerationError, match=RESERVED):
            finetune(dataset, alice, name)
    with pytest.raises(GenerationError, match=RESERVED):
        output_name_check("roberta-large", user=None)  # the operator's own jobs neither


def test_a_folder_outside_the_model_directory_is_refused(dataset, model_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (model_dir / "link").symlink_to(elsewhere)
    with pytest.raises(GenerationError, match="output_name 'link': its model folder 'link'"):
        finetune(dataset, researcher("alice"), "link")


def test_replacing_ones_own_source_in_its_own_folder_is_allowed(dataset):
    """The folder of the very source being replaced is the one folder that may exist (as a re-run
    of a fine-tuning publishes over its earlier checkpoint)."""
    alice = researcher("alice", "studies.view_rationalesource", "studies.change_rationalesource")
    folder = model_folder("alice t5")
    folder.mkdir()
    source = model_source_register(name="alice t5", backend="seq2seq", folder=folder, user=alice)
    assert model_location(source.model_name_or_path) == str(folder)
    job = finetune(dataset, alice, "alice t5")
    assert job.params["output_name"] == "alice t5"
    # ... but not when another source reads that folder too.
    RationaleSource.objects.create(name="copy", kind="lm", backend="seq2seq", model_name_or_path=str(folder))
    with pytest.raises(GenerationError, match=TAKEN):
        finetune(dataset, alice, "alice t5")


def test_the_check_before_publishing_sees_a_folder_taken_since_the_job_was_created(dataset):
    """Two jobs whose names share a folder: whichever publishes second finds it taken."""
    alice = researcher("alice")
    finetune(dataset, alice, "run a")
    folder = model_folder("run-a")
    folder.mkdir()
    RationaleSource.objects.create(name="run-a", kind="lm", backend="seq2seq", model_name_or_path=str(folder))
    with pytest.raises(GenerationError, match=TAKEN):
        output_name_check("run a", user=alice)
