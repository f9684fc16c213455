"""Every Gen-U figure depends on how the answerers answered: their backend, prompt template and
decoding (greedy, 8 new tokens and, for causal answerers, a stop at the newline, under the source's
own ``decoding``). The Gen-U job records them in its params (``answering``, per role) and scoring
names them beside the figure; older jobs read "not recorded". The answerers' fine-tuning is named by
its base model and what the paper states of it (SPEC section 4: the base model only), never as
"the paper's" setup beyond that."""
from __future__ import annotations

import pytest

from scoring.reports.sections import gen_u_section
from scoring.services import study_score
from studies.models import GenerationJob, GenUPrediction
from studies.services import generation
from studies.services.generation import finetune
from studies.services.generation.common import GenerationError
from studies.services.questions import generalization_questions_set_validation
from tests.factories import GeneralizationQuestionFactory, RationaleSourceFactory
from tests.studies.lm.openai_server import OpenAIServer, completion

from .test_services_score import collect, make_unit

pytestmark = pytest.mark.django_db


def _training(mode: str, dataset, base_model: str = "t5-base") -> dict:
    """What a checkpoint fine-tuned with the ``paper-answerers`` preset records (finetune.RECORDED)."""
    preset = finetune.PRESETS["paper-answerers"]
    return {**preset["all"], "preset": "paper-answerers", "overrides": [], "mode": mode, "base_model": base_model,
            "from_paper": list(preset["from_paper"]),
            "data": {"dataset": dataset.name, "split": "train", "generalization_questions": 0}}


def _study_with_question(utility_study):
    study, items, good, _ = utility_study
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    question = GeneralizationQuestionFactory(item=items[0], text="q?", answer="yes")
    generalization_questions_set_validation(questions=[question], status="valid")
    return study, items, good, question


def _answerers(study, url, *, ir_decoding=None, ir_base="t5-base"):
    fi = RationaleSourceFactory(name="ans-I", kind="lm", backend="openai", model_name_or_path="ckpt-I",
                                endpoint_url=url, decoding={"backoff_s": 0.01, "concurrency": 1},
                                training=_training("answer_i", study.dataset))
    fir = RationaleSourceFactory(name="ans-IR", kind="lm", backend="openai", model_name_or_path="ckpt-IR",
                                 endpoint_url=url, decoding={"backoff_s": 0.01, "concurrency": 1, **(ir_decoding or {})},
                                 training=_training("answer_ir", study.dataset, base_model=ir_base))
    return fi, fir


def _run_genu(source, items, fi, fir):
    job = generation.generation_job_run(job_id=generation.generation_job_create(
        kind="genu_answers", source=source, item_ids=[i.pk for i in items], user=None, enqueue=False,
        params={"answerer_i": fi.pk, "answerer_ir": fir.pk}).pk)
    assert job.status == "done", job.error
    return job


def test_the_genu_job_records_each_answerers_backend_template_and_decoding(utility_study):
    study, items, good, _ = _study_with_question(utility_study)
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        fi, fir = _answerers(study, server.url, ir_decoding={"max_new_tokens": 3})
        job = _run_genu(good, items, fi, fir)

    answering = job.params["answering"]
    [i], [ir] = answering["I"], answering["IR"]
    assert (i["backend"], i["template"]) == ("openai", "causal_answer_input")
    assert "SPEC states no prompt template for F^I" in i["template_origin"]
    assert (i["decoding"]["do_sample"], i["decoding"]["max_new_tokens"], i["decoding"]["stop"]) == (False, 8, ["\n"])
    assert ir["template"] == "causal_answer_with_rationale_input"
    assert ir["decoding"]["max_new_tokens"] == 3  # the answerer source's own decoding, as used
    # Written by the job as it runs: a caller may not give it.
    with pytest.raises(GenerationError, match="params.answering"):
        generation.generation_job_create(kind="genu_answers", source=good, item_ids=[items[0].pk], user=None,
                                         enqueue=False, params={"answerer_i": fi.pk, "answerer_ir": fir.pk,
                                                                "answering": {}})


def test_gen_u_results_and_report_name_the_recorded_backend_template_and_decoding(utility_study):
    study, items, good, _ = _study_with_question(utility_study)
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        fi, fir = _answerers(study, server.url)
        _run_genu(good, items, fi, fir)

    gen_u = study_score(study=study, similarity=False).results["gen_u"]

    [efi], [efir] = gen_u["answerers"]["F^I"], gen_u["answerers"]["F^IR"]
    assert (efi["backend"], efi["template"]) == ("openai", "causal_answer_input")
    assert efi["decoding"]["max_new_tokens"] == 8 and efi["decoding"]["stop"] == ["\n"]
    assert efir["template"] == "causal_answer_with_rationale_input"
    method = gen_u["method"]
    assert ("F^I ckpt-I (base t5-base; " in method and "backend openai, prompt template causal_answer_input (ours "
            "(SPEC states no prompt template for F^I)), decoding greedy, max_new_tokens 8, stop at [\"\\n\"]" in method)


def test_predictions_of_jobs_that_recorded_no_settings_read_not_recorded(utility_study):
    study, items, good, question = _study_with_question(utility_study)
    fi = RationaleSourceFactory(name="old-I", kind="lm", backend="seq2seq", model_name_or_path="old-I")
    for role in ("I", "IR"):
        GenUPrediction.objects.create(generalization_question=question, rationale_source=good, answerer=role,
                                      answerer_source=fi, answerer_model="old-I", predicted_answer="yes",
                                      correct=True)
    GenerationJob.objects.create(kind=GenerationJob.Kind.GENU_ANSWERS, source=good,
                                 params={"answerer_i": fi.pk, "answerer_ir": fi.pk})  # from before the record

    gen_u = study_score(study=study, similarity=False).results["gen_u"]

    [entry] = gen_u["answerers"]["F^I"]
    assert (entry["backend"], entry["template"], entry["decoding"]) == ("not recorded",) * 3
    assert "backend, prompt template and decoding not recorded" in gen_u["method"]


def test_the_answerers_are_named_by_base_model_and_only_the_base_model_is_the_papers(utility_study):
    study, items, good, _ = _study_with_question(utility_study)
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        fi, fir = _answerers(study, server.url, ir_base="t5-small")
        _run_genu(good, items, fi, fir)

    gen_u = study_score(study=study, similarity=False).results["gen_u"]

    method = gen_u["method"]
    [efir] = gen_u["answerers"]["F^IR"]
    assert efir["fine_tuning_preset"] == "paper-answerers"  # the key stays; the text says what it is
    assert "F^I ckpt-I (base t5-base; fine-tuning preset paper-answerers: of its settings the paper states " \
           "only the base model (t5-base); the others are ours or FEB's script's" in method
    # An answerer fine-tuned from another base does not read as the paper's.
    assert "F^IR ckpt-IR (base t5-small; " in method
    assert "the paper states only the base model (t5-base, not this answerer's t5-small)" in method


def test_a_source_whose_gen_u_job_ran_before_questions_were_validated_is_named_with_what_it_left_out(utility_study):
    """Given two scored items, each with a validated rephrase and an unvalidated similar question
    (answer "no"), and rationales of good-lm and bad-lm: good-lm's Gen-U job runs, then the similar
    questions are validated, then bad-lm's job runs. With the same always-"yes" answerers, good-lm's
    Gen-U rests on one question an item and bad-lm's on two; the results say so per source, warn,
    and give the figures on the questions every source answered beside the default's."""
    study, items, good, bad = utility_study
    similar = []
    for item in items[:2]:
        for source in (good, bad):
            collect(study, make_unit(study, item, source), [("no", "yes")] * 5)
        rephrase = GeneralizationQuestionFactory(item=item, text=f"rephrase {item.pk}?", answer="yes")
        generalization_questions_set_validation(questions=[rephrase], status="valid")
        similar.append(GeneralizationQuestionFactory(item=item, qtype="similar", text=f"similar {item.pk}?",
                                                     answer="no"))
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        fi, fir = _answerers(study, server.url)
        _run_genu(good, items[:2], fi, fir)
        generalization_questions_set_validation(questions=similar, status="valid")
        _run_genu(bad, items[:2], fi, fir)

    run = study_score(study=study, similarity=False)

    gen_u = run.results["gen_u"]
    answered = gen_u["questions_answered"]
    assert answered["by_source"]["good-lm"]["n_questions"] == 4
    assert answered["by_source"]["good-lm"]["n_questions_without_predictions"] == 2
    assert answered["by_source"]["bad-lm"]["n_questions"] == 4
    assert answered["by_source"]["bad-lm"]["n_questions_without_predictions"] == 0
    assert ("Gen-U of good-lm leaves out 2 questions that count now but that its Gen-U job did not answer (they were "
            "validated or added after it ran): resume or rerun its Gen-U job to compare sources on the same "
            "questions.") in run.results["warnings"]
    assert not any(w.startswith("Gen-U of bad-lm leaves out") for w in run.results["warnings"])
    # The default (the published figures): good-lm on the rephrases only (0), bad-lm on both (0 and -1, the
    # lowest: -1). On the questions every source answered, both rest on the rephrases.
    assert answered["default"] == "as_answered"
    assert {s: (answered["by_source"][s]["as_answered"]["mean"], answered["by_source"][s]["as_answered"]["n_questions"])
            for s in ("good-lm", "bad-lm")} == {"good-lm": (0.0, 2), "bad-lm": (-1.0, 4)}
    assert {s: (answered["by_source"][s]["every_source_answered"]["mean"],
                answered["by_source"][s]["every_source_answered"]["n_questions"])
            for s in ("good-lm", "bad-lm")} == {"good-lm": (0.0, 2), "bad-lm": (0.0, 2)}
    # The method every Gen-U figure is shown with names the reading, and the report gives both.
    assert ("questions: each source's Gen-U rests on the questions its Gen-U job answered (the published "
            "figures); sources may rest on different questions of one item (as_answered; results.json "
            "gen_u.questions_answered gives every_source_answered beside it)") in gen_u["method"]
    section = gen_u_section(run.results)
    table = next(t for t in section.tables if t.name == "gen_u_questions_answered")
    assert {(row["source"], row["reading"], row["mean"], row["n_questions"]) for row in table.rows} == {
        ("good-lm", "as each job answered (default)", 0.0, 2), ("good-lm", "answered by every source", 0.0, 2),
        ("bad-lm", "as each job answered (default)", -1.0, 4), ("bad-lm", "answered by every source", 0.0, 2),
        ("all", "as each job answered (default)", answered["by_source"]["all"]["as_answered"]["mean"], 6),
        ("all", "answered by every source", 0.0, 4)}
    assert any(note.startswith("Which questions a source's Gen-U rests on") and "2 time(s) a question that counts "
               "now has no prediction of a source" in note for note in section.notes)


def test_a_source_without_gen_u_predictions_is_not_counted_as_leaving_questions_out(utility_study):
    """Given two scored items, each with a validated rephrase and an unvalidated similar question,
    and rationales of good-lm and bad-lm: only good-lm's Gen-U job runs, then the similar questions
    are validated. bad-lm is named as having no Gen-U predictions, not as leaving questions out (its
    job never ran), and the figures on the questions every source answered are over good-lm, the only
    source with predictions: its two rephrases, not none."""
    study, items, good, bad = utility_study
    similar = []
    for item in items[:2]:
        for source in (good, bad):
            collect(study, make_unit(study, item, source), [("no", "yes")] * 5)
        rephrase = GeneralizationQuestionFactory(item=item, text=f"rephrase {item.pk}?", answer="yes")
        generalization_questions_set_validation(questions=[rephrase], status="valid")
        similar.append(GeneralizationQuestionFactory(item=item, qtype="similar", text=f"similar {item.pk}?",
                                                     answer="no"))
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        fi, fir = _answerers(study, server.url)
        _run_genu(good, items[:2], fi, fir)
    generalization_questions_set_validation(questions=similar, status="valid")

    run = study_score(study=study, similarity=False)

    warnings = run.results["warnings"]
    assert "Source bad-lm has no Gen-U predictions; Gen-U is not computed for it." in warnings
    assert not any(w.startswith("Gen-U of bad-lm leaves out") for w in warnings)
    assert any(w.startswith("Gen-U of good-lm leaves out 2 questions") for w in warnings)
    answered = run.results["gen_u"]["questions_answered"]
    assert set(answered["by_source"]) == {"good-lm"}
    entry = answered["by_source"]["good-lm"]
    assert (entry["n_questions"], entry["n_questions_without_predictions"]) == (4, 2)
    assert {reading: (entry[reading]["n"], entry[reading]["mean"], entry[reading]["n_questions"])
            for reading in ("as_answered", "every_source_answered")} == {
        "as_answered": (2, 0.0, 2), "every_source_answered": (2, 0.0, 2)}


def test_every_source_and_all_carry_both_readings_of_the_questions_answered(utility_study):
    """Given good-lm and bad-lm scored on two items with a validated rephrase each, and good-lm also
    on a third item with one: good-lm's Gen-U job answers all three items, bad-lm's only the third
    (where it is not scored). Each entry of ``by_source`` (good-lm, bad-lm, all) has both readings
    with the same figures' keys: null figures (n 0, mean None) where a reading leaves it no item,
    and over all, with only good-lm scored, good-lm's."""
    study, items, good, bad = utility_study
    for item in items[:3]:
        for source in (good, bad) if item in items[:2] else (good,):
            collect(study, make_unit(study, item, source), [("no", "yes")] * 5)
        rephrase = GeneralizationQuestionFactory(item=item, text=f"rephrase {item.pk}?", answer="yes")
        generalization_questions_set_validation(questions=[rephrase], status="valid")
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        fi, fir = _answerers(study, server.url)
        _run_genu(good, items[:3], fi, fir)
        _run_genu(bad, items[2:3], fi, fir)

    answered = study_score(study=study, similarity=False).results["gen_u"]["questions_answered"]

    by_source = answered["by_source"]
    assert set(by_source) == {"good-lm", "bad-lm", "all"}
    keys = set(by_source["good-lm"]["as_answered"])
    for name, entry in by_source.items():
        for reading in ("as_answered", "every_source_answered"):
            assert set(entry[reading]) == keys, (name, reading)
    figures = {name: {reading: (entry[reading]["n"], entry[reading]["mean"], entry[reading]["n_questions"])
                      for reading in ("as_answered", "every_source_answered")}
               for name, entry in by_source.items()}
    assert figures == {
        "good-lm": {"as_answered": (3, 0.0, 3), "every_source_answered": (1, 0.0, 1)},
        "bad-lm": {"as_answered": (0, None, 0), "every_source_answered": (0, None, 0)},
        "all": {"as_answered": (3, 0.0, 3), "every_source_answered": (1, 0.0, 1)},
    }
