"""A Gen-U prediction records what its answerer was given (``GenUPrediction.inputs``,
``studies.services.generation.genu.genu_inputs``): the question, the rationale F^IR was shown and the
answerer's checkpoint. A prediction made on a question or rationale edited since is left out of
Gen-U and counted (``gen_u.inputs``), and a rerun of the Gen-U job answers it again in place; one
made by a checkpoint replaced since is named by the training it recorded, with a warning, and a
rerun answers it again with the new checkpoint."""
from __future__ import annotations

import pytest

from scoring.services import study_score
from studies.models import GeneralizationQuestion, GenerationJob, GenUPrediction, Rationale
from studies.services import generation
from studies.services.content import content_row_save
from studies.services.generation import genu as genu_module
from studies.services.questions import generalization_questions_set_validation
from tests.factories import GeneralizationQuestionFactory, RationaleSourceFactory
from tests.studies.lm.conftest import model_dir  # noqa: F401 (autouse: each test its own RL_MODEL_DIR)
from tests.studies.lm.openai_server import OpenAIServer, completion
from tests.studies.lm.test_checkpoint_replaced import _publish, lab  # noqa: F401 (the fixture)

from .test_services_score import collect, make_unit

pytestmark = pytest.mark.django_db


def _study_with_question(utility_study):
    study, items, good, _ = utility_study
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    question = GeneralizationQuestionFactory(item=items[0], text="Is the sky blue?", answer="yes")
    generalization_questions_set_validation(questions=[question], status="valid")
    return study, items, good


def _run_genu(source, items, answerer_i, answerer_ir) -> GenerationJob:
    job = generation.generation_job_run(job_id=generation.generation_job_create(
        kind="genu_answers", source=source, item_ids=[i.pk for i in items], user=None, enqueue=False,
        params={"answerer_i": answerer_i.pk, "answerer_ir": answerer_ir.pk}).pk)
    assert job.status == "done", job.error
    return job


def test_a_prediction_on_a_rationale_edited_since_is_left_out_and_a_rerun_answers_it_again(utility_study):
    """The audit's probe: F^IR says yes only when shown "BLUE-FACT"; Gen-U +1. The rationale is then
    edited to "Bananas are yellow." (content_row_save). Before, the stale predictions kept Gen-U at
    +1 with no warning, and a rerun answered nothing."""
    study, items, good = _study_with_question(utility_study)
    rationale = Rationale.objects.get(item=items[0], source=good)
    Rationale.objects.filter(pk=rationale.pk).update(text="BLUE-FACT: the sky is blue.")
    prompts = []

    def answer(path, body):
        prompts.append(body["prompt"])
        return 200, completion([" yes" if "BLUE-FACT" in str(body["prompt"]) else " no"]), {}

    with OpenAIServer(answer) as server:
        answerers = [RationaleSourceFactory(name=f"ans-{role}", kind="lm", backend="openai",
                                            model_name_or_path=f"ckpt-{role}", endpoint_url=server.url,
                                            decoding={"backoff_s": 0.01, "concurrency": 1}) for role in ("I", "IR")]
        _run_genu(good, items, *answerers)
        gen_u = study_score(study=study, similarity=False).results["gen_u"]
        assert gen_u["tie_rules"]["by_source"]["good-lm"]["lowest"]["mean"] == 1.0

        rationale.refresh_from_db()
        rationale.text = "Bananas are yellow."
        content_row_save(user=None, obj=rationale, changed=["text"])

        run = study_score(study=study, similarity=False)
        gen_u = run.results.get("gen_u", {})
        assert "good-lm" not in (gen_u.get("tie_rules") or {}).get("by_source", {})  # left out, not +1
        assert any("good-lm: 1 of its 2 Gen-U predictions are left out: the rationale (F^IR) they were answered on "
                   "changed since" in w for w in run.warnings), run.warnings
        assert "1 predictions left out: their question or rationale changed" in gen_u["method"]

        sent = len(prompts)
        _run_genu(good, items, *answerers)  # answers the stale F^IR prediction again, in place
        assert len(prompts) == sent + 1 and "Bananas are yellow." in str(prompts[-1])
        assert GenUPrediction.objects.filter(rationale_source=good).count() == 2
        _run_genu(good, items, *answerers)  # nothing stale now: nothing asked
        assert len(prompts) == sent + 1

    run = study_score(study=study, similarity=False)
    gen_u = run.results["gen_u"]
    assert gen_u["tie_rules"]["by_source"]["good-lm"]["lowest"]["mean"] == -1.0
    assert gen_u["inputs"]["by_source"]["good-lm"] == {
        "n_predictions": 2, "n_left_out": 0, "question_changed": 0, "rationale_changed": 0,
        "inputs_not_recorded": 0, "checkpoint_replaced": 0}
    assert not any("are left out" in w for w in run.warnings) and "left out: their question" not in gen_u["method"]


def test_predictions_of_a_replaced_checkpoint_are_named_by_the_training_they_recorded(utility_study, lab,  # noqa: F811
                                                                                       monkeypatch):
    """Predictions by ``ft-x`` (t5-base, the lab's first training job); ``ft-x`` is then fine-tuned
    again as t5-large under the same name (same folder). Before, the report named the answerer
    t5-large with no warning; a rerun of the Gen-U job answered nothing."""
    study, items, good = _study_with_question(utility_study)
    calls = []

    class Backend:
        def generate(self, prompts, decoding):
            calls.append(prompts)
            return [["<extra_id_0> yes <extra_id_1>"] for _ in prompts]

    monkeypatch.setattr(genu_module, "source_backend", lambda *a, **k: Backend())
    answerer = lab["source"]
    _run_genu(good, items, answerer, answerer)
    [entry] = study_score(study=study, similarity=False).results["gen_u"]["answerers"]["F^I"]
    assert entry["base_model"] == "t5-base"

    replacing = generation.generation_job_create(
        kind="finetune", dataset=lab["dataset"], split="train", user=None, enqueue=False,
        params={"mode": "answer_i", "base_model": "t5-large", "output_name": "ft-x"})
    _publish(replacing, None)

    run = study_score(study=study, similarity=False)
    gen_u = run.results["gen_u"]
    [entry] = gen_u["answerers"]["F^I"]
    assert entry["base_model"] == "t5-base"  # the checkpoint that answered, as recorded
    assert entry["checkpoint_replaced"] == {"replaced_by_training_job": replacing.pk,
                                            "answered_with_training_job": lab["first"].pk}
    assert f"replaced since by training job {replacing.pk}" in gen_u["method"]
    assert any(f"F^I checkpoint models:ft-x (source ft-x) was replaced after 1 of its Gen-U predictions were made "
               f"(by training job {replacing.pk})" in w for w in run.warnings), run.warnings
    assert gen_u["inputs"]["by_source"]["good-lm"]["checkpoint_replaced"] == 2

    sent = len(calls)
    _run_genu(good, items, answerer, answerer)  # re-answers both with the new checkpoint, in place
    assert len(calls) == sent + 2
    assert GenUPrediction.objects.filter(rationale_source=good).count() == 2
    run = study_score(study=study, similarity=False)
    [entry] = run.results["gen_u"]["answerers"]["F^I"]
    assert entry["base_model"] == "t5-large" and "checkpoint_replaced" not in entry
    assert not any("was replaced after" in w for w in run.warnings)


def _answerers(server, *names):
    return [RationaleSourceFactory(name=name, kind="lm", backend="openai", model_name_or_path=f"ckpt-{name}",
                                   endpoint_url=server.url, decoding={"backoff_s": 0.01, "concurrency": 1})
            for name in names]


def test_an_edit_of_a_questions_own_choices_alone_leaves_its_predictions_standing(utility_study):
    """The review's probe: the Gen-U prompt shows the question's text with yes/no choices, never its
    own choices (``genu_answer``). Before, an edit of those alone left out every prediction (no
    ``gen_u`` figures) while a rerun sent byte-identical prompts."""
    study, items, good = _study_with_question(utility_study)
    question = items[0].generalization_questions.get()
    GeneralizationQuestion.objects.filter(pk=question.pk).update(
        metadata={"choices": [{"label": "yes", "text": "Yes"}, {"label": "no", "text": "No"}]})
    prompts = []

    def answer(path, body):
        prompts.append(body["prompt"])
        return 200, completion([" yes"]), {}

    with OpenAIServer(answer) as server:
        answerers = _answerers(server, "ans-I", "ans-IR")
        _run_genu(good, items, *answerers)
        GeneralizationQuestion.objects.filter(pk=question.pk).update(
            metadata={"choices": [{"label": "yes", "text": "Certainly"}, {"label": "no", "text": "Never"}]})
        sent = len(prompts)
        _run_genu(good, items, *answerers)
        assert len(prompts) == sent  # nothing stale: the prompts would be the same

    gen_u = study_score(study=study, similarity=False).results["gen_u"]
    assert gen_u["inputs"]["by_source"]["good-lm"]["n_left_out"] == 0, gen_u["inputs"]
    assert "good-lm" in gen_u["tie_rules"]["by_source"]


def test_stale_predictions_of_other_answerers_are_answered_again_in_place(utility_study):
    """The review's probe: every stored prediction stale (the question edited since), a job with other
    answerers was refused, saying every Gen-U figure would stay the stored answerers'. Only
    predictions that still stand refuse it now; it replaces the stale ones in place."""
    study, items, good = _study_with_question(utility_study)
    question = items[0].generalization_questions.get()
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        old = _answerers(server, "old-I", "old-IR")
        new = _answerers(server, "new-I", "new-IR")
        _run_genu(good, items, *old)
        with pytest.raises(generation.GenerationError, match="from other answerers"):  # they stand
            generation.generation_job_create(
                kind="genu_answers", source=good, item_ids=[i.pk for i in items], user=None, enqueue=False,
                params={"answerer_i": new[0].pk, "answerer_ir": new[1].pk})
        GeneralizationQuestion.objects.filter(pk=question.pk).update(text="Is the sea blue?")
        before = set(GenUPrediction.objects.filter(rationale_source=good).values_list("pk", flat=True))
        _run_genu(good, items, *new)

    stored = GenUPrediction.objects.filter(rationale_source=good)
    assert set(stored.values_list("pk", flat=True)) == before  # in place: one row per question and role
    assert set(stored.values_list("answerer", "answerer_source_id")) == {("I", new[0].pk), ("IR", new[1].pk)}
    gen_u = study_score(study=study, similarity=False).results["gen_u"]
    assert gen_u["inputs"]["by_source"]["good-lm"]["n_left_out"] == 0


def test_every_prediction_left_out_keeps_the_inputs_block_and_says_why(utility_study):
    """The review's probe: the question edited after both its predictions. Before, the ``gen_u`` block
    disappeared (a warning pointed to a ``gen_u.inputs`` that did not exist) and another said the
    source had no Gen-U predictions."""
    study, items, good = _study_with_question(utility_study)
    question = items[0].generalization_questions.get()
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        _run_genu(good, items, *_answerers(server, "ans-I", "ans-IR"))
    GeneralizationQuestion.objects.filter(pk=question.pk).update(text="Is the sea blue?")

    run = study_score(study=study, similarity=False)
    gen_u = run.results["gen_u"]
    assert gen_u["inputs"]["by_source"]["good-lm"]["n_left_out"] == 2, gen_u
    assert "2 predictions left out: their question or rationale changed" in gen_u["method"]
    assert not any("Source good-lm has no Gen-U predictions" in w for w in run.warnings), run.warnings
    assert any("Source good-lm: 2 of its 2 Gen-U predictions are left out as stale" in w for w in run.warnings), \
        run.warnings
