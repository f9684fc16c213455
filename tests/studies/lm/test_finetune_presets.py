"""Fine-tuning presets say what they reproduce: the paper's answerers (T5-base; train split only,
no generalization questions unless asked, in our reading), F as the paper's Quark starting point,
the FEB few-shot source, and a smoke test. Checked on the parameters a job is created with (no training
here: tests/studies/lm/test_finetune.py trains real tiny checkpoints)."""
from io import StringIO

import pytest
from django.core.management import call_command

from studies.models import GeneralizationQuestion, GenerationJob
from studies.services.generation import GenerationError, finetune

pytestmark = pytest.mark.django_db


def params(dataset, **given):
    return finetune.finetune_params(dataset=dataset, split=given.pop("split", "train"),
                                    params={"base_model": "local-t5", **given})


@pytest.fixture
def with_questions(train_items):
    """Train items with validated generalization questions, as after the README's import."""
    for item in train_items[:5]:
        GeneralizationQuestion.objects.create(item=item, qtype="rephrase", text=f"Is it so that {item.question}",
                                              answer=item.gold_answer, validation_status="valid")
    return train_items


def test_answerers_default_to_the_papers_training_without_generalization_questions(strategyqa_dataset,
                                                                                  with_questions):
    for mode in ("answer_i", "answer_ir"):
        p = params(strategyqa_dataset, mode=mode)
        assert p["preset"] == "paper-answerers" and p["overrides"] == []
        assert p["examples"] == len(with_questions)  # the train items only
        assert p["data"]["generalization_questions"] == 0 and p["include_generalization"] is False
        assert (p["data"]["dataset"], p["data"]["split"], p["data"]["items"]) == ("strategyqa", "train", 60)
        assert p["base_model_in_paper"] == "t5-base" and p["from_paper"] == ["base_model_in_paper"]
    assert params(strategyqa_dataset, mode="answer_ir")["data"]["rationales"] == "gold rationales of strategyqa train"
    assert params(strategyqa_dataset, mode="answer_i")["data"]["rationales"] is None
    # Adding the generalization questions is the researcher's explicit choice, and it is recorded.
    p = params(strategyqa_dataset, mode="answer_ir", include_generalization=True)
    assert p["examples"] == len(with_questions) + 5 and p["data"]["generalization_questions"] == 5
    assert p["overrides"] == ["include_generalization"] and "include_generalization" not in p["from_paper"]


def test_rationalizer_presets_reproduce_the_quark_start_and_the_feb_source(strategyqa_dataset, train_items):
    start = params(strategyqa_dataset, mode="rationalizer")
    assert start["preset"] == "paper-quark-start"
    assert (start["n_shot"], start["epochs"], start["examples"]) == (None, 25, len(train_items))  # full set, 25 epochs
    assert start["base_model_in_paper"] == "t5-large" and {"n_shot", "epochs"} <= set(start["from_paper"])
    feb = params(strategyqa_dataset, mode="rationalizer", preset="feb-few-shot")
    assert (feb["n_shot"], feb["examples"], feb["base_model_in_paper"]) == (48, 48, "t5-3b")
    smoke = params(strategyqa_dataset, mode="answer_i", preset="quick")
    assert "smoke test" in smoke["preset_description"] and smoke["from_paper"] == []
    assert smoke["data"]["generalization_questions"] == 0


def test_a_preset_for_other_modes_and_another_split_are_stated(strategyqa_dataset, train_items, dev_items):
    with pytest.raises(GenerationError, match="preset 'feb-few-shot' is for rationalizer, not answer_i: for "
                                              "answer_i choose paper-answerers, quick"):
        params(strategyqa_dataset, mode="answer_i", preset="feb-few-shot")
    with pytest.raises(GenerationError, match="preset 'paper-answerers' is for answer_i, answer_ir, not rationalizer"):
        params(strategyqa_dataset, mode="rationalizer", preset="paper-answerers")
    with pytest.raises(GenerationError, match="unknown fine-tuning preset 'paper'"):
        params(strategyqa_dataset, mode="answer_i", preset="paper")
    p = params(strategyqa_dataset, mode="answer_i", split="dev")
    assert p["overrides"] == ["split"] and p["data"]["split"] == "dev"


def test_the_command_queues_the_papers_answerers_by_default(strategyqa_dataset, with_questions):
    call_command("finetune_t5", "--dataset", "strategyqa", "--mode", "answer_ir", "--base-model", "local-t5",
                 "--queue", stdout=StringIO())
    job = GenerationJob.objects.get(kind="finetune")
    assert job.params["preset"] == "paper-answerers" and job.params["data"]["generalization_questions"] == 0
    call_command("finetune_t5", "--dataset", "strategyqa", "--mode", "answer_ir", "--base-model", "local-t5",
                 "--include-generalization", "--output-name", "fir-with-questions", "--queue",
                 stdout=StringIO())
    job = GenerationJob.objects.filter(kind="finetune").latest("pk")
    assert job.params["overrides"] == ["include_generalization"] and job.params["data"]["generalization_questions"] == 5


def test_from_paper_lists_only_what_spec_or_an_issue_quoting_the_paper_states():
    """SPEC section 4 and issue 21 say the answerers are two T5-base models fine-tuned on StrategyQA:
    not which split or how much of it, nor that F^IR trains on gold rationales, nor that no
    generalization questions are added. Issue 21 quotes the paper's T5-large F (whole training
    set, 25 epochs) and its few-shot T5-3B source (FEB, 48 examples). Each claimed value names
    where it is stated."""
    assert {name: preset["from_paper"] for name, preset in finetune.PRESETS.items()} == {
        "paper-answerers": ("base_model_in_paper",),
        "paper-quark-start": ("base_model_in_paper", "n_shot", "epochs"),
        "feb-few-shot": ("base_model_in_paper", "n_shot"),
        "quick": (),
    }
    assert {name: set(stated) for name, stated in finetune.STATED_IN.items()} == {
        name: set(preset["from_paper"]) for name, preset in finetune.PRESETS.items()}
    answerers = finetune.PRESETS["paper-answerers"]["description"]
    assert "as the paper trains them" not in answerers and "Our reading, which the paper does not state" in answerers
