"""A warm worker keeps its loaded models (``backends.load_transformers_model``), but a checkpoint
republished under the same path (a training job registering under an existing source's name:
``lifecycle.model_folder_publish`` renames a new folder into place) is loaded again, and the old
copy is dropped: later jobs never run on weights that the source's training record no longer names."""
import shutil

import pytest

from studies.lm import backends
from studies.services.generation.lifecycle import model_folder, model_folder_publish

pytestmark = pytest.mark.lm
torch = pytest.importorskip("torch")


def _first_weight(loaded: backends.LoadedModel):
    return next(loaded.model.parameters()).detach().float().cpu().clone()


def _perturbed_copy(source_folder):
    """A ``write`` for ``model_folder_publish``: the model in ``source_folder`` with every weight moved."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    def write(folder):
        model = AutoModelForSeq2SeqLM.from_pretrained(source_folder)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.25)
        model.save_pretrained(folder)
        AutoTokenizer.from_pretrained(source_folder).save_pretrained(folder)
    return write


def test_a_republished_checkpoint_is_loaded_again_and_the_old_one_dropped(lm_models, model_dir):
    folder = model_folder("ft-x")
    model_folder_publish(folder, lambda partial: shutil.copytree(lm_models["t5"], partial))
    first = backends.load_transformers_model("seq2seq", str(folder))
    assert backends.Seq2SeqBackend(str(folder)).loaded is first  # unchanged files: the cached copy
    old_weight = _first_weight(first)

    model_folder_publish(folder, _perturbed_copy(lm_models["t5"]))
    second = backends.load_transformers_model("seq2seq", str(folder))
    assert second is not first
    assert torch.allclose(_first_weight(second), old_weight + 0.25)
    assert backends.Seq2SeqBackend(str(folder)).loaded is second
    held = [entry for key, entry in backends._MODEL_CACHE.items() if key[1] == str(folder)]
    assert len(held) == 1 and held[0][1] is second  # the old weights are not kept beside the new

    model_folder_publish(folder, lambda partial: shutil.copytree(lm_models["t5"], partial))  # and back
    third = backends.load_transformers_model("seq2seq", str(folder))
    assert third is not second and torch.equal(_first_weight(third), old_weight)
