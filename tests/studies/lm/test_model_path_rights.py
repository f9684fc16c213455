"""A job may name the model it loads by its path: fine-tuning's ``base_model``, faithfulness's
``task_model``, Quark's ``policy_path``. Such a path is a source's model as much as the source is:
``generation_job_inputs_check`` lets a researcher load it only through a source they may read
(``sources_for_user``), so another researcher's checkpoint named by its folder is refused, with
the answer a missing folder gets. Operator models that no source holds (the demo's GGUF, a folder
outside ``RL_MODEL_DIR``) and hub names stay allowed."""
import shutil
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import override_settings

from studies.models import GenerationJob, RationaleSource, StudyShare
from studies.selectors import sources_for_user
from studies.services.content import content_row_save
from studies.services.generation import GenerationError, generation_job_create
from studies.services.generation.lifecycle import model_folder, model_source_register
from studies.services.model_paths import local_model_path, model_location, model_path_readable
from studies.services.studies import study_create
from tests.api.conftest import grant
from tests.factories import DatasetFactory

from .test_job_rights import _train_pool

pytestmark = pytest.mark.django_db
RESEARCHER = ("studies.view_generationjob", "studies.add_generationjob", "studies.add_study",
              "studies.view_dataset", "studies.view_item")


def researcher(name):
    return grant(get_user_model().objects.create_user(username=name, password="pw", is_staff=True), *RESEARCHER)


@pytest.fixture
def lab():
    """Alice; Bob's private fine-tuned source ``bobs-t5`` (its weights in ``RL_MODEL_DIR/bobs-t5``),
    listed by his study; a dataset both may read."""
    alice, bob = researcher("alice"), researcher("bob")
    dataset = DatasetFactory(name="shared-ds")
    _train_pool(dataset)
    folder = model_folder("bobs-t5")
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    source = RationaleSource.objects.create(name="bobs-t5", kind="lm", backend="seq2seq",
                                            model_name_or_path=str(folder))
    study = study_create(name="bobs-study", dataset=dataset, split="train", sources=[source], owner=bob)
    return {"alice": alice, "bob": bob, "dataset": dataset, "folder": folder, "source": source, "study": study}


def finetune(lab, user, base_model):
    return generation_job_create(kind="finetune", dataset=lab["dataset"], split="train", user=user, enqueue=False,
                                 params={"mode": "rationalizer", "base_model": base_model, "output_name": "mine"})


def refusal(call, value) -> str:
    with pytest.raises(GenerationError) as refused:
        call()
    return str(refused.value).replace(repr(str(value)), "PATH")


def test_fine_tuning_from_another_researchers_checkpoint_folder_is_refused_as_a_missing_one(lab):
    missing = model_folder("no-such-model")
    said = {str(p): refusal(lambda p=p: finetune(lab, lab["alice"], str(p)), p)
            for p in (lab["folder"], lab["folder"] / "config.json", missing)}
    assert len(set(said.values())) == 1
    assert said[str(missing)] == ("params.base_model: no model PATH that you may use (a model folder or .gguf file "
                                  "that exists, or a hub name)")
    assert not GenerationJob.objects.exists()
    # Bob, whose study lists it, fine-tunes from it.
    # His job keeps the folder relative to the model directory, as a source does.
    assert finetune(lab, lab["bob"], str(lab["folder"])).params["base_model"] == "models:bobs-t5"


def test_a_source_outside_the_model_directory_is_held_too_even_where_its_folder_is_missing(lab):
    """The audit's case: a private source whose model path this machine does not have."""
    bobs = RationaleSource.objects.create(name="bobs-private-t5", kind="lm", backend="seq2seq",
                                          model_name_or_path="/srv/var/models/bobs-private-t5")
    lab["study"].sources.add(bobs)
    with pytest.raises(GenerationError, match="params.base_model: no model '/srv/var/models/bobs-private-t5'"):
        finetune(lab, lab["alice"], bobs.model_name_or_path)


def test_a_share_of_the_study_that_lists_the_source_lets_her_load_it(lab):
    StudyShare.objects.create(study=lab["study"], user=lab["alice"], level="view")
    assert finetune(lab, lab["alice"], str(lab["folder"])).created_by == lab["alice"]


def test_faithfulness_with_another_researchers_task_model_is_refused(lab):
    def job(path):
        return lambda: generation_job_create(kind="faithfulness", dataset=lab["dataset"], user=lab["alice"],
                                             enqueue=False, params={"task_model": path, "task_backend": "classifier"})
    assert refusal(job(str(lab["folder"])), lab["folder"]).startswith("params.task_model: no model PATH")
    # A hub name passes this check (and the job is refused for what it lacks: a highlight source).
    assert refusal(job("org/classifier"), "org/classifier") == "choose the highlight source"


def test_a_quark_policy_folder_of_another_researcher_or_of_a_quark_run_reads_as_no_policy(lab):
    run = model_folder("quark-runs") / "job7" / "last"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    said = {}
    for path in (lab["folder"], run, model_folder("nothing-here")):
        said[path.name] = refusal(lambda path=path: generation_job_create(
            kind="quark", dataset=lab["dataset"], user=lab["alice"], enqueue=False,
            params={"reward": "marker:is", "policy_path": str(path)}), path)
    assert set(said.values()) == {"policy PATH is neither a rationale source, a model folder nor a .gguf file"}


def test_operator_models_and_hub_names_stay_allowed(lab, settings, tmp_path):
    gguf = tmp_path / "demo" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    settings.RL_DEMO_LM_GGUF = gguf
    operators_t5 = tmp_path / "operator-models" / "t5-small"  # outside RL_MODEL_DIR, no source's model
    operators_t5.mkdir(parents=True)
    in_model_dir = model_folder("t5-base")  # an operator's copy in RL_MODEL_DIR that no source holds
    in_model_dir.mkdir()
    for base_model in (str(gguf), str(operators_t5), str(in_model_dir), "google/t5-small", "t5-small"):
        kept = "models:t5-base" if base_model == str(in_model_dir) else base_model  # relative to RL_MODEL_DIR
        assert finetune(lab, lab["alice"], base_model).params["base_model"] == kept


# --- a source pointed at a path: the same rule (model_paths.source_model_path_problem) ------------


def _may_add_sources(user):
    return grant(user, "studies.add_rationalesource", "studies.change_rationalesource")


def test_a_researcher_may_not_point_a_new_source_at_another_researchers_checkpoint(lab):
    from studies.services.content import ContentChangeRefused, content_row_save

    alice = _may_add_sources(lab["alice"])
    for path in (str(lab["folder"]), str(lab["folder"] / "config.json"), str(lab["folder"].parent / "quark-runs")):
        with pytest.raises(ContentChangeRefused, match="model_name_or_path: no model .* that you may use"):
            content_row_save(user=alice, obj=RationaleSource(name="mine", kind="lm", backend="seq2seq",
                                                             model_name_or_path=path), changed=())
    assert not RationaleSource.objects.filter(name="mine").exists()
    # Her own folder (not made yet), a hub name and the operator's writes are allowed.
    for n, path in enumerate((str(model_folder("alices-own")), "google/flan-t5-small")):
        content_row_save(user=alice, obj=RationaleSource(name=f"mine{n}", kind="lm", backend="seq2seq",
                                                         model_name_or_path=path), changed=())
    content_row_save(user=None, obj=RationaleSource(name="operators", kind="lm", backend="seq2seq",
                                                    model_name_or_path=str(lab["folder"])), changed=())
    # Editing her own source onto Bob's folder is refused the same way.
    mine = RationaleSource.objects.get(name="mine0")
    mine.model_name_or_path = str(lab["folder"])
    with pytest.raises(ContentChangeRefused, match="no model"):
        content_row_save(user=alice, obj=mine, changed=["model_name_or_path"])


def test_the_admins_source_form_names_the_refused_path_beside_its_field(lab, rf):
    from django.contrib import admin

    alice = _may_add_sources(lab["alice"])
    request = rf.post("/admin/studies/rationalesource/add/")
    request.user = get_user_model().objects.get(pk=alice.pk)
    form_class = admin.site._registry[RationaleSource].get_form(request)
    data = {"name": "mine", "kind": "lm", "backend": "seq2seq", "decoding": "{}", "demonstrations": "[]", "seed": 0}
    refused = form_class(data={**data, "model_name_or_path": str(lab["folder"])})
    assert not refused.is_valid()
    assert refused.errors["model_name_or_path"] == [f"no model {str(lab['folder'])!r} that you may use (a folder of a "
                                                    "source you may read, a hub name, or a folder of your own "
                                                    "outside the lab's model folders)"]
    allowed = form_class(data={**data, "model_name_or_path": "google/flan-t5-small"})
    allowed.is_valid()
    assert "model_name_or_path" not in allowed.errors


# --- a model directory moved with the database (restored on another host) ------------------------

def _register_bobs_checkpoint(lab, files_from=None):
    """Bob's fine-tuned checkpoint ``bobs-ft`` registered the way a training job does
    (``model_source_register``) and listed by his study."""
    folder = model_folder("bobs-ft")
    if files_from is None:
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    else:
        shutil.copytree(files_from, folder)
    source = model_source_register(name="bobs-ft", backend="seq2seq", folder=folder, user=lab["bob"])
    lab["study"].sources.add(source)
    return folder, source


def test_a_registered_checkpoint_stays_its_sources_after_the_model_directory_moves(lab, tmp_path):
    """The audit's probe: Bob's registered checkpoint, once ``RL_MODEL_DIR`` is copied elsewhere and
    the settings point there, still resolves to its folder (now the moved one), and Alice may
    neither read it nor fine-tune from it by its new path; Bob still may."""
    folder, source = _register_bobs_checkpoint(lab)
    assert not model_path_readable(str(folder), visible_sources=sources_for_user(user=lab["alice"]))

    moved_dir = tmp_path / "elsewhere" / "models"
    shutil.copytree(settings.RL_MODEL_DIR, moved_dir)
    with override_settings(RL_MODEL_DIR=moved_dir):
        moved = moved_dir / "bobs-ft"
        assert not model_path_readable(str(moved), visible_sources=sources_for_user(user=lab["alice"]))
        with pytest.raises(GenerationError, match="params.base_model: no model"):
            finetune(lab, lab["alice"], str(moved))
        source.refresh_from_db()
        assert local_model_path(source.model_name_or_path) == moved.resolve()
        assert Path(model_location(source.model_name_or_path)).is_dir()
        assert finetune(lab, lab["bob"], str(moved)).params["base_model"] == "models:bobs-ft"
    assert source.model_name_or_path == "models:bobs-ft"


def test_a_moved_checkpoint_loads_from_its_new_folder(lab, tmp_path, lm_models):
    """Every loader resolves the stored form against the current ``RL_MODEL_DIR``: the source's
    model loads from the moved folder, the old one gone."""
    from studies.lm.backends import load_transformers_model, model_files_identity

    old_dir = Path(settings.RL_MODEL_DIR)
    _, source = _register_bobs_checkpoint(lab, files_from=lm_models["t5"])
    moved_dir = tmp_path / "elsewhere" / "models"
    shutil.move(old_dir, moved_dir)
    with override_settings(RL_MODEL_DIR=moved_dir):
        loaded = load_transformers_model("seq2seq", source.model_name_or_path)
        assert loaded.model is not None
        assert model_files_identity(model_location(source.model_name_or_path))


def test_a_source_typed_with_an_absolute_path_under_the_model_directory_is_kept_relative(lab):
    alice = _may_add_sources(lab["alice"])
    mine = content_row_save(user=alice, obj=RationaleSource(
        name="alices-own", kind="lm", backend="seq2seq", model_name_or_path=str(model_folder("alices-own"))),
        changed=())
    assert RationaleSource.objects.get(pk=mine.pk).model_name_or_path == "models:alices-own"
    # A hub name and a folder elsewhere stay as typed.
    for n, path in enumerate(("google/flan-t5-small", "/srv/elsewhere/t5")):
        row = content_row_save(user=None, obj=RationaleSource(name=f"other{n}", kind="lm", backend="seq2seq",
                                                               model_name_or_path=path), changed=())
        assert RationaleSource.objects.get(pk=row.pk).model_name_or_path == path
