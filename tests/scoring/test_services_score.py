"""Scoring collected studies from raw Annotation rows (utility and generalization)."""
from __future__ import annotations

import itertools
import json
from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

from annotations.models import Annotation, Assignment, Claim, Participant, Unit
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.release import assignment_release
from lab.jsontext import json_fingerprint
from scoring import metrics
from scoring.models import ScoreRun, UnitScore
from scoring.services import study_score
from scoring.services.results_folder import bootstrap_note
from scoring.services.score import GENERATION_RUN_KEYS, endpoint_shown, generation_hash
from studies.models import GeneralizationQuestion, GenUPrediction, Study
from tests.factories import (
    GeneralizationQuestionFactory,
    ItemFactory,
    RationaleFactory,
    RationaleSourceFactory,
    StudyFactory,
)

pytestmark = pytest.mark.django_db


_workers = itertools.count()


def collect(study, unit, answers, *, status=Assignment.Status.SUBMITTED, start=0):
    """One new worker per (before, after) pair in ``answers`` answers ``unit`` through the
    questionnaire's services and submits; with ``status`` rejected the task is then rejected
    through the releasing service the review uses. A pair with ``None`` after stops there: the
    task stays active (a worker still at work or gone), so its answer does not count.

    The assignment and its one claim are placed by hand (the assignment rule would choose the
    units itself) so that each unit gets the answers the test chooses; everything after that goes
    through the services, so what counts is what ``claims_that_count`` says."""
    for before, after in answers:
        n = next(_workers)
        participant, _ = Participant.objects.get_or_create(platform="link", external_id=f"w{n}")
        assignment = Assignment.objects.create(
            study=study, participant=participant, expires_at=timezone.now() + timedelta(hours=1)
        )
        claim = Claim.objects.create(
            assignment=assignment, unit=unit, study=study, participant=participant,
            question_key=unit.question_key, position=0,
        )
        Unit.objects.filter(pk=unit.pk).update(n_claimed=F("n_claimed") + 1)  # as the claim does
        for step, answer in (("before", before), ("after", after)):
            if answer is None:
                break
            annotation_submit(assignment=assignment, claim=claim, step=step, answer=answer)
        else:
            assignment_submit(assignment=assignment)
            if status == Assignment.Status.REJECTED:
                assignment_release(assignment=assignment, status=status)


def make_unit(study, item, source, quota=5, gq=None):
    return Unit.objects.create(study=study, item=item, source=source, quota=quota,
                               question_key=f"q{item.pk}" + (f"g{gq.pk}" if gq else ""), generalization_question=gq)


def test_utility_study_majorities_utilities_and_warnings(utility_study):
    study, items, good, bad = utility_study
    # good-lm: wrong -> right on items 0-1 (useful), right -> right on item 2 (unsure);
    # item 3 has only 3 workers (short).
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 3 + [("yes", "yes")] * 2)
    collect(study, make_unit(study, items[1], good), [("no", "yes")] * 4 + [("no", "no")])
    collect(study, make_unit(study, items[2], good), [("yes", "yes")] * 5)
    collect(study, make_unit(study, items[3], good), [("no", "yes")] * 3)
    # bad-lm: wrong after everywhere; item 0 has a 2-2 tie before (4 valid workers, one rejected).
    unit = make_unit(study, items[0], bad)
    collect(study, unit, [("yes", "no"), ("yes", "no"), ("no", "no"), ("no", "no")])
    collect(study, unit, [("yes", "yes")], status=Assignment.Status.REJECTED, start=10)
    collect(study, make_unit(study, items[1], bad), [("yes", "no")] * 5)
    # A worker who gave only the first answer does not count.
    collect(study, make_unit(study, items[2], bad, quota=6), [("yes", "no")] * 5 + [("no", None)], start=20)
    make_unit(study, items[3], bad)  # nobody yet

    run = study_score(study=study, similarity=False, both_directions=True)

    assert run.status == ScoreRun.Status.DONE, run.error
    scores = {(u.item_id, u.source.name): u for u in UnitScore.objects.filter(study=study).select_related("source")}
    assert [scores[(it.pk, "good-lm")].utility for it in items] == [1, 1, 0, 1]
    assert [scores[(it.pk, "bad-lm")].utility for it in items[:3]] == [-1, -1, -1]
    tie = scores[(items[0].pk, "bad-lm")]
    assert tie.before_tie and tie.before_majority == "" and tie.n_annotators == 4
    assert scores[(items[2].pk, "bad-lm")].n_annotators == 5
    assert (items[3].pk, "bad-lm") not in scores
    r = run.results
    assert r["ties"] == {"before": 1, "after": 0, "units_with_tie": 1}
    assert r["utility_shares"]["good-lm"]["useful"] == pytest.approx(0.75)
    assert r["utility_shares"]["bad-lm"]["not_useful"] == 1.0
    assert r["task_accuracy"] == {"bad-lm": 0.0, "good-lm": 1.0, "all": pytest.approx(4 / 7)}
    # What the figures rest on is recorded with them: the items drawn and the intervals' bootstrap,
    # and the report's notes read it from there.
    from scoring.reports.sections import utility_section

    assert r["bootstrap"] == {"method": "percentile", "confidence": 0.95, "n_resamples": 2000, "seed": 0}
    assert (r["study"]["split"], r["study"]["item_sample_size"], r["study"]["sample_seed"]) == ("test", None, 0)
    notes = " ".join(utility_section({**r, "bootstrap": {**r["bootstrap"], "n_resamples": 500}}).notes)
    assert "500 resamples (seed 0)" in notes and "split, all of them" in notes
    # Combined Theil's U equals the metric over the stored unit table.
    units = list(UnitScore.objects.filter(study=study))
    expected = metrics.theils_u([u.utility for u in units], [u.task_correct for u in units])
    assert r["theils_u_utility_given_task_accuracy"]["all"] == pytest.approx(expected)
    assert r["theils_u_task_accuracy_given_utility"]["all"] == pytest.approx(
        metrics.theils_u([u.task_correct for u in units], [u.utility for u in units]))
    assert any("1 of 8 units have no completed answers" in w for w in run.warnings)
    assert any("short of the 5 annotators" in w and "1 with 3" in w and "1 with 4" in w for w in run.warnings)
    assert any("has no Gen-U predictions" in w for w in run.warnings)
    assert r["agreement"]["before"]["krippendorff_alpha"] is not None
    assert r["agreement"]["before"]["fleiss_kappa"] is None  # unequal raters


def test_rescoring_replaces_unit_scores(utility_study):
    study, items, good, _ = utility_study
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    study_score(study=study, similarity=False)
    study_score(study=study, similarity=False)
    assert UnitScore.objects.filter(study=study).count() == 1
    assert ScoreRun.objects.filter(study=study, status="done").count() == 2


def test_gen_u_per_item_and_theils_u_against_utility(utility_study):
    study, items, good, bad = utility_study
    for it, answers in zip(items[:2], ([("no", "yes")] * 5, [("yes", "yes")] * 5), strict=True):
        collect(study, make_unit(study, it, good), answers)
    # item 0: two questions, F^I wrong & F^IR right on both -> s = [1, 1] -> Gen-U 1
    # item 1: s = [1, 0] -> tie -> 0
    pattern = {items[0]: [(False, True), (False, True)], items[1]: [(False, True), (True, True)]}
    for it, pairs in pattern.items():
        for k, (i_ok, ir_ok) in enumerate(pairs):
            gq = GeneralizationQuestionFactory(item=it, text=f"g{it.pk}-{k}?")
            predict(gq, good, "I", i_ok)
            predict(gq, good, "IR", ir_ok)

    run = study_score(study=study, similarity=False)

    scores = {u.item_id: u for u in UnitScore.objects.filter(study=study)}
    assert scores[items[0].pk].gen_u == 1 and scores[items[1].pk].gen_u == 0
    assert run.results["theils_u_utility_given_gen_u"]["good-lm"] == pytest.approx(1.0)
    assert run.results["gen_u"]["consistency"]["good-lm"]["F^IR"]["consistency"] == 1.0
    # What a bundle of the answerers' consistency is: the item's questions, without the item (SPEC's
    # bundle cannot be formed: the answerers do not answer the item), in the results and the report.
    from scoring.reports.sections import gen_u_section

    bundle = run.results["gen_u"]["consistency_bundle"]
    assert "the item itself is left out" in bundle and "SPEC section 5's bundle" in bundle
    assert f"The answerers' consistency (results.json, gen_u.consistency) is over bundles of {bundle}." in (
        gen_u_section(run.results).notes)


def predict(question, source, answerer, correct, *, parsed=True, model=None):
    """A Gen-U prediction as the answering job stores it: a blank answer when the output did not parse."""
    other = "no" if question.answer == "yes" else "yes"
    GenUPrediction.objects.create(
        generalization_question=question, rationale_source=source, answerer=answerer,
        answerer_model=model or f"t5-base-{answerer}",
        predicted_answer=(question.answer if correct else other) if parsed else "", correct=correct and parsed)


def test_gen_u_leaves_unparseable_answers_out_and_states_its_method(utility_study):
    from studies.services.questions import generalization_questions_set_validation

    study, items, good, _ = utility_study
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    # Two questions score 0 (both answerers right). Three have an F^I output that did not parse and
    # F^IR right: counted as wrong F^I answers (the old rule) they would score +1 three times and
    # make Gen-U +1. Left out of the mode, Gen-U is 0.
    questions = [GeneralizationQuestionFactory(item=items[0], text=f"q{k}?", answer="yes") for k in range(5)]
    generalization_questions_set_validation(questions=questions, status="valid")
    for q in questions[:2]:
        predict(q, good, "I", True)
        predict(q, good, "IR", True)
    for q in questions[2:]:
        predict(q, good, "I", False, parsed=False)
        predict(q, good, "IR", True)
    RationaleSourceFactory(name="F^I checkpoint", kind="lm", backend="seq2seq", model_name_or_path="t5-base-I",
                           training={"preset": "paper", "epochs": 25})

    run = study_score(study=study, similarity=False)

    assert UnitScore.objects.get(study=study, item=items[0]).gen_u == 0
    gen_u = run.results["gen_u"]
    assert gen_u["unparseable"]["good-lm"] == {
        "questions": 5, "unparseable_i_answers": 3, "unparseable_ir_answers": 0,
        "questions_left_out_unparseable": 3, "questions_left_out_incomplete": 0}
    assert gen_u["n_questions"] == 2
    assert gen_u["question_filter"] == "validated questions only" and gen_u["n_questions_unvalidated"] == 0
    assert "lowest score" in gen_u["tie_rule"]
    # These predictions record no answerer source (as those written before it was): read by model path.
    (answerer,) = gen_u["answerers"]["F^I"]
    assert {k: answerer[k] for k in ("model", "matched_by", "fine_tuning_preset", "overrides", "trained_on",
                                     "training")} == {
        "model": "t5-base-I", "matched_by": "model path", "fine_tuning_preset": "paper", "overrides": None,
        "trained_on": None, "training": {"preset": "paper", "epochs": 25}}
    assert answerer["template"] == answerer["decoding"] == "not recorded"  # predictions of no recorded job
    assert gen_u["answerers"]["F^IR"][0]["fine_tuning_preset"] is None
    assert any("left out of Gen-U because an answerer's output did not parse" in w for w in run.results["warnings"])
    # The report states the same next to the Gen-U shares.
    from scoring.reports.sections import report_sections

    notes = " ".join(next(s for s in report_sections(run) if s.key == "gen_u").notes)
    assert "Questions: validated questions only (5 validated, 0 unvalidated; 2 counted). Tie rule: A tie" in notes
    assert "not counted as wrong: good-lm 3 questions (3 F^I, 0 F^IR answers)." in notes
    # The answerers as results.json's method names them (the report's text is the scoring service's).
    from scoring.services.genu import answerer_text
    answerers = run.results["gen_u"]["answerers"]
    assert (f"Answerers: {answerer_text('F^I', answerers['F^I'][0])}; "
            f"{answerer_text('F^IR', answerers['F^IR'][0])}.") in notes
    assert "F^I t5-base-I (base" in notes and "fine-tuning preset paper:" in notes


def test_gen_u_on_unvalidated_questions_is_stated(utility_study):
    study, items, good, _ = utility_study
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    q = GeneralizationQuestionFactory(item=items[0], text="unchecked?", answer="yes")
    predict(q, good, "I", False)
    predict(q, good, "IR", True)
    run = study_score(study=study, similarity=False)
    assert run.results["gen_u"]["question_filter"].startswith("includes unvalidated")
    assert run.results["gen_u"]["n_questions_unvalidated"] == 1
    assert any("nobody validated" in w for w in run.results["warnings"])


def test_similarity_uses_local_bertscore_model(utility_study):
    pytest.importorskip("bert_score")
    study, items, good, bad = utility_study
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    collect(study, make_unit(study, items[0], bad), [("yes", "no")] * 5)
    collect(study, make_unit(study, items[1], good), [("yes", "yes")] * 5)

    run = study_score(study=study, similarity=True)

    sims = {u.source.name: u.similarity for u in UnitScore.objects.filter(study=study, item=items[0]).select_related("source")}
    assert sims["good-lm"] > sims["bad-lm"]
    assert run.results["similarity_model"] == run.results["similarity"]["path"]
    assert run.results["similarity"]["num_layers"] == 6 and "MiniLM" in run.results["similarity"]["name"]
    assert "roberta-large" in run.results["similarity"]["paper_used"]
    assert 0.0 <= run.results["correlation_ratio_utility_similarity"]["all"] <= 1.0
    assert run.results["similarity"]["paper"] is None  # a dataset the paper did not report
    study.dataset.name = "StrategyQA"
    study.dataset.save()
    paper = study_score(study=study, similarity=True).results["similarity"]["paper"]
    assert paper["same_model"] is False and paper["correlation_ratio"]["all"] == 0.041


def test_generalization_study_accuracy_delta_by_type_and_utility(utility_study):
    study, items, good, _ = utility_study
    # The original item's utility comes from a scored utility study.
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    study_score(study=study, similarity=False)
    gen_study = StudyFactory(kind=Study.Kind.GENERALIZATION, dataset=study.dataset, annotators_per_unit=3)
    gen_study.items.add(items[0])
    cf = GeneralizationQuestionFactory(item=items[0], qtype=GeneralizationQuestion.Type.COUNTERFACTUAL, answer="no")
    rp = GeneralizationQuestionFactory(item=items[0], qtype=GeneralizationQuestion.Type.REPHRASE, answer="yes")
    collect(gen_study, make_unit(gen_study, items[0], good, quota=3, gq=cf), [("yes", "no")] * 3)   # wrong -> right
    collect(gen_study, make_unit(gen_study, items[0], good, quota=3, gq=rp), [("yes", "yes")] * 3, start=5)

    run = study_score(study=gen_study)

    assert run.status == ScoreRun.Status.DONE, run.error
    gen = run.results["generalization"]
    assert gen["by_type"]["counterfactual"]["accuracy_delta"] == 1.0
    assert gen["by_type"]["rephrase"]["accuracy_delta"] == 0.0
    assert gen["by_utility"]["useful"]["n"] == 2
    consistency = gen["consistency"]["all_generalization_questions"]
    assert consistency["after"]["consistency"] == 1.0 and consistency["before"]["consistency"] == 0.0
    assert gen["consistency"]["item_with_counterfactuals"]["after"]["n_bundles"] == 1


def test_figure_4_leaves_out_questions_marked_invalid_after_the_answers_and_says_so(utility_study):
    """Figure 4 counts the questions Gen-U counts: a question marked invalid after its answers were
    collected (the validation stays editable once the study opens) is left out, and the results and
    the report say which questions counted and what was left out."""
    from scoring.reports.sections import generalization_section
    from studies.services.questions import generalization_questions_set_validation

    study, items, good, _ = utility_study
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    study_score(study=study, similarity=False)
    gen_study = StudyFactory(kind=Study.Kind.GENERALIZATION, dataset=study.dataset, annotators_per_unit=3)
    gen_study.items.add(items[0])
    cf = GeneralizationQuestionFactory(item=items[0], qtype=GeneralizationQuestion.Type.COUNTERFACTUAL, answer="no")
    rp = GeneralizationQuestionFactory(item=items[0], qtype=GeneralizationQuestion.Type.REPHRASE, answer="yes")
    generalization_questions_set_validation(questions=[cf], status="valid")
    collect(gen_study, make_unit(gen_study, items[0], good, quota=3, gq=cf), [("yes", "no")] * 3)
    collect(gen_study, make_unit(gen_study, items[0], good, quota=3, gq=rp), [("yes", "yes")] * 3, start=5)

    generalization_questions_set_validation(questions=[rp], status="invalid")
    run = study_score(study=gen_study)

    assert run.status == ScoreRun.Status.DONE, run.error
    r = run.results
    gen = r["generalization"]
    assert set(gen["by_type"]) == {"counterfactual"}
    assert gen["all"]["n"] == 1 and r["n_units"] == 1 and r["agreement"]["before"]["n_annotations"] == 3
    assert gen["question_filter"] == "validated questions only"
    assert "not marked invalid when scored" in gen["question_rule"]
    assert (gen["n_questions"], gen["n_questions_validated"], gen["n_questions_unvalidated"]) == (1, 1, 0)
    assert (gen["n_questions_invalid_left_out"], gen["n_units_invalid_left_out"],
            gen["answers_invalid_left_out"]) == (1, 1, 6)
    assert any("1 generalization questions of this study are now marked invalid" in w and "6 counted answers" in w
               for w in r["warnings"])
    notes = " ".join(generalization_section(r).notes)
    assert "Questions: validated questions only (1 validated, 0 unvalidated; 1 counted); 1 marked invalid left out " \
           "with their 1 units and 6 counted answers" in notes

    # Back to unvalidated, the rephrase counts again and the filter says unvalidated questions are in.
    generalization_questions_set_validation(questions=[rp], status="unvalidated")
    gen = study_score(study=gen_study).results["generalization"]
    assert set(gen["by_type"]) == {"counterfactual", "rephrase"}
    assert gen["question_filter"].startswith("includes unvalidated questions")
    assert (gen["n_questions_unvalidated"], gen["n_questions_invalid_left_out"]) == (1, 0)


def test_figure_4_takes_utility_only_from_studies_its_owner_owns_and_names_them(utility_study):
    # Alice's generalization study shares its item and source with her utility study and with Bob's,
    # which Bob scored last and with another outcome. Figure 4 uses Alice's (Bob's is not hers, even
    # once he shares it with her, and before, the most recently scored study won whoever owned it)
    # and says which study it used.
    from django.contrib.auth import get_user_model

    from studies.services.sharing import study_share

    User = get_user_model()
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    study, items, good, _ = utility_study
    Study.objects.filter(pk=study.pk).update(owner=alice, name="alices-utility")
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)  # useful
    alices_run = study_score(study=study, similarity=False)
    bobs = StudyFactory(annotators_per_unit=5, dataset=study.dataset, owner=bob, name="bobs-utility")
    collect(bobs, make_unit(bobs, items[0], good), [("no", "no")] * 5, start=5)  # not useful
    bobs_run = study_score(study=bobs, similarity=False)
    gen_study = StudyFactory(kind=Study.Kind.GENERALIZATION, dataset=study.dataset, annotators_per_unit=3,
                             owner=alice, name="alices-generalization")
    gen_study.items.add(items[0])
    cf = GeneralizationQuestionFactory(item=items[0], qtype=GeneralizationQuestion.Type.COUNTERFACTUAL, answer="no")
    collect(gen_study, make_unit(gen_study, items[0], good, quota=3, gq=cf), [("yes", "no")] * 3, start=10)

    gen = study_score(study=gen_study).results["generalization"]
    assert set(gen["by_utility"]) == {"useful"}
    source = gen["original_utility_from"]
    # with the score run whose unit scores were read
    assert source["studies"] == [{"id": study.pk, "name": "alices-utility", "pairs": 1, "score_run": alices_run.pk}]
    assert source["pairs_in_several_studies"] == 0 and "owner owns" in source["rule"]

    # Shared with Alice, Bob's study still lends nothing: a share is his to give, not her choice.
    study_share(study=bobs, user=bob, with_user=alice)
    assert study_score(study=gen_study).results["generalization"]["original_utility_from"]["studies"] == source["studies"]
    # A second study of Alice's lends (as many counted annotations, created later), and the results
    # say two studies scored the pair differently.
    rerun = StudyFactory(annotators_per_unit=5, dataset=study.dataset, owner=alice, name="alices-rerun")
    collect(rerun, make_unit(rerun, items[0], good), [("no", "no")] * 5, start=20)  # not useful
    rerun_run = study_score(study=rerun, similarity=False)
    run = study_score(study=gen_study)
    gen = run.results["generalization"]
    assert set(gen["by_utility"]) == {"not_useful"}
    source = gen["original_utility_from"]
    assert source["studies"] == [{"id": rerun.pk, "name": "alices-rerun", "pairs": 1, "score_run": rerun_run.pk}]
    assert (source["pairs_in_several_studies"], source["pairs_the_studies_disagree_on"]) == (1, 1)
    assert bobs.pk not in [o["id"] for o in source["other_lenders"]] and bobs_run.pk
    assert any("have different utilities there" in w for w in run.results["warnings"])
    # The report prints it next to Figure 4.
    from scoring.reports.sections import generalization_section

    notes = " ".join(generalization_section(run.results).notes)
    assert "from 'alices-rerun' (1 pairs)" in notes and "1 of them differently" in notes


def test_the_results_say_whose_answers_count_reviewed_or_not(utility_study):
    # Three tasks on one unit: one approved, two submitted and not reviewed, of which one failed its
    # attention check. All three count until rejected, and the results and the report say so.
    from annotations.models import AttentionCheck
    from annotations.services.platforms.access import OPERATOR
    from annotations.services.platforms.review import assignment_approve
    from scoring.reports.sections import utility_section

    study, items, good, _ = utility_study
    unit = make_unit(study, items[0], good, quota=3)
    collect(study, unit, [("no", "yes")] * 2)
    assignment_approve(user=OPERATOR, study=study, assignment=Assignment.objects.filter(study=study).first())
    check = AttentionCheck.objects.create(study=study, question="Choose 'no'.", correct_answer="no",
                                          choices=[{"label": "yes", "text": "Yes"}, {"label": "no", "text": "No"}])
    participant = Participant.objects.create(platform="link", external_id="careless")
    task = Assignment.objects.create(study=study, participant=participant, expires_at=timezone.now() + timedelta(hours=1))
    claim = Claim.objects.create(assignment=task, unit=unit, study=study, participant=participant,
                                 question_key=unit.question_key, position=0)
    Unit.objects.filter(pk=unit.pk).update(n_claimed=F("n_claimed") + 1)
    attention = Claim.objects.create(assignment=task, attention_check=check, study=study, participant=participant,
                                     question_key=f"check{check.pk}", position=1)
    annotation_submit(assignment=task, claim=claim, step="before", answer="no")
    annotation_submit(assignment=task, claim=claim, step="after", answer="yes")
    annotation_submit(assignment=task, claim=attention, step="attention", answer="yes")  # wrong
    assignment_submit(assignment=task)

    run = study_score(study=study, similarity=False)

    counted = run.results["counted_answers"]
    assert (counted["tasks_approved"], counted["tasks_not_reviewed"], counted["tasks_failing_an_attention_check"]) \
        == (1, 2, 1)
    assert "until it is rejected" in counted["rule"]
    assert any("2 of the tasks counted here are submitted but not yet reviewed (1 counted tasks failed an attention "
               "check)" in w for w in run.results["warnings"])
    assert "Counted: 1 approved tasks and 2 submitted but not yet reviewed" in " ".join(
        utility_section(run.results).notes)


def test_study_without_units_fails_with_a_clear_error():
    study = StudyFactory()
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.FAILED
    assert "has no units" in run.error


def _faithfulness_study(utility_study):
    """The utility study with faithfulness on and its good source's rationales as highlights."""
    study, items, good, _ = utility_study
    study.faithfulness_enabled = True
    study.save()
    good.has_highlights = True
    good.save()
    study.sources.add(good)
    study.items.add(*items)
    return study, items, good


def test_faithfulness_opt_in_adds_test_columns_with_caveats(utility_study):
    study, items, good = _faithfulness_study(utility_study)
    for it, (pf, ph, pw) in zip(items, [(0.9, 0.95, 0.3), (0.8, 0.7, 0.6), (0.6, 0.6, 0.6), (0.7, 0.8, 0.2)], strict=True):
        r = it.rationales.get(source=good)
        r.faithfulness = {"p_full": pf, "p_highlight": ph, "p_without": pw}  # as the importer stores them
        r.save()
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)

    run = study_score(study=study, similarity=False)

    assert run.results["test_sufficiency"] == pytest.approx(((0.9 - 0.95) + 0.1 + 0 - 0.1) / 4)
    assert run.results["test_comprehensiveness"] == pytest.approx((0.6 + 0.2 + 0 + 0.5) / 4)
    assert "select-then-predict" in run.results["faithfulness"]["caveats"]["sufficiency"]
    # Imported probabilities: the import format's y_hat is predicted from the highlight.
    assert run.results["faithfulness"]["per_source"]["good-lm"]["y_hat_from"] == ["highlight"]
    assert "pyhighlights" in run.results["faithfulness"]["caveats"]["y_hat_from_highlight"]


def test_faithfulness_columns_are_named_after_the_study_split_and_say_the_y_hat_rule(utility_study):
    from scoring.reports.sections import faithfulness_section

    study, items, good = _faithfulness_study(utility_study)
    Study.objects.filter(pk=study.pk).update(split="dev")
    study.refresh_from_db()
    for it in items:  # from a job with an external full-input task model
        r = it.rationales.get(source=good)
        r.faithfulness = {"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3, "y_hat": "yes", "y_hat_from": "full",
                          "task_model": "/models/task", "job_id": 1}
        r.save()
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)

    run = study_score(study=study, similarity=False)

    assert run.results["dev_sufficiency"] == pytest.approx(0.1)
    assert run.results["dev_comprehensiveness"] == pytest.approx(0.6)
    assert "test_sufficiency" not in run.results and "test_comprehensiveness" not in run.results
    faith = run.results["faithfulness"]
    assert faith["split"] == "dev" and faith["per_source"]["good-lm"]["y_hat_from"] == ["full"]
    assert set(faith["caveats"]) == {"y_hat_from_full"} and "ERASER" in faith["caveats"]["y_hat_from_full"]
    table = faithfulness_section(run.results).tables[0]
    assert table.rows[0]["y_hat_from"] == "full input (ERASER)"
    assert table.rows[-1]["source"] == "dev (all sources)" and table.rows[-1]["sufficiency"] == pytest.approx(0.1)


def test_faithfulness_says_how_many_rationales_it_left_out(utility_study):
    study, items, good = _faithfulness_study(utility_study)
    for it in items[:3]:  # the fourth rationale has none (a job that has not reached it)
        r = it.rationales.get(source=good)
        r.faithfulness = {"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3}
        r.save()
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)

    run = study_score(study=study, similarity=False)

    assert run.results["faithfulness"]["per_source"]["good-lm"]["n"] == 3
    assert run.results["test_sufficiency"] == pytest.approx(0.1)
    assert any("good-lm: 1 of its 4 rationales" in w and "over the other 3" in w for w in run.results["warnings"])


def marks(**marked: bool) -> dict[str, str]:
    """A properties answer as the worker's page stores it (``steps.clean_answer``: "yes" or "no" per
    property; these units are a utility study's, so the answer is written beside them by hand)."""
    return {name: "yes" if value else "no" for name, value in marked.items()}


def test_properties_mixed_model_reports_log_odds_with_intervals():
    study = StudyFactory(annotators_per_unit=3)
    sources = [RationaleSourceFactory(name=f"props-{i}") for i in range(2)]
    rng = __import__("random").Random(4)
    for _n in range(40):
        item = ItemFactory(dataset=study.dataset, gold_answer="yes")
        for source in sources:
            factual = rng.random() < 0.5
            useful = rng.random() < (0.8 if factual else 0.2)
            unit = make_unit(study, item, source, quota=3)
            collect(study, unit, [("no", "yes") if useful else ("yes", "yes")] * 3)
            for claim in unit.claims.all():
                Annotation.objects.create(claim=claim, step="properties",
                                          payload=marks(factual=factual, grammatical=True))

    run = study_score(study=study, similarity=False)

    model = run.results["properties_model"]
    assert model["n_rationales"] == 80
    assert model["constant_properties_dropped"] == ["grammatical"]
    assert "more than half of its annotators" in model["mark_rule"] and model["even_splits"] == 0
    term = model["terms"]["factual"]
    assert term["ci"][0] < term["log_odds"] < term["ci"][1]
    assert term["log_odds"] > 0.5  # useful far more often when factual
    # Every rationale here is useful or unsure: with unsure left out there is one outcome, nothing to fit.
    assert model["unsure_dropped"]["fitted"] is False and "need at least 10" in model["unsure_dropped"]["not_fitted"]


def test_properties_model_states_its_outcome_coding_and_priors_and_gives_the_other_reading():
    """SPEC section 7's "useful vs not" leaves unsure open: the model counts unsure as not useful,
    says so and which priors it used, and gives the other reading (unsure left out) next to it."""
    from scoring.reports.sections import properties_section

    study = StudyFactory(annotators_per_unit=3)
    sources = [RationaleSourceFactory(name=f"coding-{i}") for i in range(2)]
    rng = __import__("random").Random(11)
    answers = {1: ("no", "yes"), 0: ("yes", "yes"), -1: ("yes", "no")}
    for _n in range(40):
        item = ItemFactory(dataset=study.dataset, gold_answer="yes")
        for source in sources:
            factual = rng.random() < 0.5
            utility = rng.choices([1, 0, -1], weights=[6, 2, 2] if factual else [2, 2, 6])[0]
            unit = make_unit(study, item, source, quota=3)
            collect(study, unit, [answers[utility]] * 3)
            for claim in unit.claims.all():
                Annotation.objects.create(claim=claim, step="properties", payload=marks(factual=factual))

    run = study_score(study=study, similarity=False)

    model = run.results["properties_model"]
    assert model["outcome"] == "useful (+1) against unsure (0) and not useful (-1) together"
    assert model["priors"] == {"fe_p": 2.0, "vcp_p": 1.0}
    n_unsure = UnitScore.objects.filter(study=study, utility=0).count()
    assert 0 < n_unsure < 80 and model["n_rationales"] == 80
    other = model["unsure_dropped"]
    assert other["fitted"] is True and other["outcome"].startswith("useful (+1) against not useful (-1)")
    assert other["n_rationales"] == 80 - n_unsure
    term = other["terms"]["factual"]
    assert term["ci"][0] < term["log_odds"] < term["ci"][1] and term["log_odds"] > 0.5
    assert term["log_odds"] != model["terms"]["factual"]["log_odds"]
    section = properties_section(run.results)
    assert [t.name for t in section.tables] == ["properties_model", "properties_model_unsure_dropped"]
    notes = " ".join(section.notes)
    assert "Outcome: useful (+1) against unsure (0) and not useful (-1) together" in notes
    assert "sd 2.0" in notes and "sd 1.0" in notes and "Other reading (useful (+1) against not useful" in notes


def test_properties_mixed_model_fits_pairwise_interactions_when_data_allows():
    study = StudyFactory(annotators_per_unit=3)
    sources = [RationaleSourceFactory(name=f"inter-{i}") for i in range(2)]
    rng = __import__("random").Random(7)
    for _n in range(40):
        item = ItemFactory(dataset=study.dataset, gold_answer="yes")
        for source in sources:
            factual, novel = rng.random() < 0.5, rng.random() < 0.5
            useful = rng.random() < (0.9 if (factual and novel) else 0.15)
            unit = make_unit(study, item, source, quota=3)
            collect(study, unit, [("no", "yes") if useful else ("yes", "yes")] * 3)
            for claim in unit.claims.all():
                Annotation.objects.create(claim=claim, step="properties",
                                          payload=marks(factual=factual, novel_info=novel))

    run = study_score(study=study, similarity=False)

    model = run.results["properties_model"]
    assert model["interactions"] is True
    assert "factual:novel_info" in model["terms"]
    assert model["terms"]["factual:novel_info"]["log_odds"] > 0  # useful when both hold together


def test_gen_u_tie_rules_are_shown_with_their_effect(utility_study):
    """SPEC picks the lowest as the conservative reading: results.json and the report give Gen-U under each rule and
    with the tied items left out, with how many items tie."""
    from scoring.reports.sections import report_sections
    from studies.services.questions import generalization_questions_set_validation

    study, items, good, bad = utility_study
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    collect(study, make_unit(study, items[1], good), [("no", "yes")] * 5)
    collect(study, make_unit(study, items[2], bad), [("yes", "no")] * 5)
    # items[0]: +1 then -1, a tie (lowest -1, highest +1, first +1); items[1]: 0 twice, no tie.
    q = [GeneralizationQuestionFactory(item=items[k // 2], text=f"q{k}?", answer="yes") for k in range(4)]
    generalization_questions_set_validation(questions=q, status="valid")
    for question, (i_ok, ir_ok) in zip(q, [(False, True), (True, False), (True, True), (True, True)], strict=True):
        predict(question, good, "I", i_ok)
        predict(question, good, "IR", ir_ok)
        # bad-lm's predictions are for items it has no unit of here (its unit is items[2]): the tie
        # rules' table counts only the scored units' pairs, as the shares and Theil's U do.
        predict(question, bad, "I", True)
        predict(question, bad, "IR", False)

    run = study_score(study=study, similarity=False)

    assert UnitScore.objects.get(study=study, item=items[0]).gen_u == -1  # the default rule, lowest
    ties = run.results["gen_u"]["tie_rules"]
    assert ties["default"] == "lowest" and set(ties["rules"]) == {"lowest", "highest", "first"}
    good_lm = ties["by_source"]["good-lm"]
    assert (good_lm["n_items"], good_lm["n_tied"]) == (2, 1)
    assert good_lm["lowest"] == {"n": 2, "mean": -0.5, "useful": 0.0, "unsure": 0.5, "not_useful": 0.5}
    assert good_lm["highest"] == good_lm["first"] == {"n": 2, "mean": 0.5, "useful": 0.5, "unsure": 0.5,
                                                      "not_useful": 0.0}
    assert good_lm["ties_left_out"] == {"n": 1, "mean": 0.0, "useful": 0.0, "unsure": 1.0, "not_useful": 0.0}
    section = next(s for s in report_sections(run) if s.key == "gen_u")
    table = next(t for t in section.tables if t.name == "gen_u_tie_rules")
    assert [(r["rule"], r["n"], r["n_tied"], r["mean"]) for r in table.rows] == [
        ("lowest (default)", 2, 1, -0.5), ("highest", 2, 1, 0.5), ("first", 2, 1, 0.5),
        ("tied items left out", 1, 1, 0.0)]
    assert any(note.startswith("SPEC section 4 breaks ties toward the lowest score, as the conservative reading.") and "highest: the highest tied score" in note
               for note in section.notes)
    # Theil's U(utility | Gen-U) under each rule: the default's is the Theil's U section's figure.
    u = ties["theils_u_utility_given_gen_u"]
    assert set(u) == {"lowest", "highest", "first", "ties_left_out"}
    assert u["lowest"] == run.results["theils_u_utility_given_gen_u"]
    assert [r["theils_u"] for r in table.rows] == [u[rule]["good-lm"] for rule in
                                                   ("lowest", "highest", "first", "ties_left_out")]


def test_gen_u_figures_name_the_answerers_preset_and_the_rationales_fir_was_trained_on(utility_study, tmp_path):
    """The answerers' checkpoints record their preset and data (studies.services.generation.finetune); every
    Gen-U figure (results.json, the report's Gen-U and Theil's U notes, the CSV notes) names them."""
    from scoring.reports.sections import report_sections
    from scoring.services.results_folder import association_rows
    from studies.services.generation import finetune
    from studies.services.questions import generalization_questions_set_validation

    study, items, good, _ = utility_study
    for item in items:
        item.split = "train"
        item.save(update_fields=["split"])
    for mode, model in (("answer_i", "ckpt-I"), ("answer_ir", "ckpt-IR")):
        params = finetune.finetune_params(dataset=study.dataset, split="train",
                                          params={"mode": mode, "base_model": "t5-base"})
        RationaleSourceFactory(name=model, kind="lm", backend="seq2seq", model_name_or_path=model,
                               training={k: params.get(k) for k in finetune.RECORDED})
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    q = GeneralizationQuestionFactory(item=items[0], text="q?", answer="yes")
    generalization_questions_set_validation(questions=[q], status="valid")
    predict(q, good, "I", False, model="ckpt-I")
    predict(q, good, "IR", True, model="ckpt-IR")

    run = study_score(study=study, similarity=False)

    gen_u = run.results["gen_u"]
    fir = gen_u["answerers"]["F^IR"][0]
    dataset = study.dataset.name
    assert fir["fine_tuning_preset"] == "paper-answerers" and fir["overrides"] == []
    assert fir["trained_on"]["rationales"] == f"gold rationales of {dataset} train"
    assert fir["trained_on"]["generalization_questions"] == 0
    preset = ("base t5-base; fine-tuning preset paper-answerers: of its settings the paper states only the base "
              "model (t5-base); the others are ours or FEB's script's")
    unrecorded = "backend, prompt template and decoding not recorded"
    assert gen_u["method"] == (
        f"Gen-U on validated questions only; ties to the lowest score; questions whose answer did not parse left "
        f"out (counted as wrong: unparsed_rules); F^I ckpt-I ({preset}; trained "
        f"on {dataset} train; {unrecorded}); F^IR ckpt-IR ({preset}; trained on {dataset} train with gold "
        f"rationales of {dataset} train; {unrecorded})")
    sections = {s.key: s for s in report_sections(run)}
    assert f"F^IR was trained on: F^IR ckpt-IR: gold rationales of {dataset} train (0 generalization questions)." in (
        sections["gen_u"].notes)
    assert any(note.startswith(gen_u["method"]) for section in sections.values() for note in section.notes
               if section.key != "gen_u")
    assert all(row["note"].startswith(gen_u["method"]) for row in association_rows(run.results)
               if "gen_u" in row["measure"])
    # gen_u_shares.csv too
    import csv

    from scoring.services import score_run_export

    written = {p.name: p for p in score_run_export(run=run, out_dir=tmp_path)}
    assert {row["note"] for row in csv.DictReader(written["gen_u_shares.csv"].open(encoding="utf-8"))} == {
        f"{gen_u['method']}. {bootstrap_note(run.results)}"}


@pytest.mark.django_db(transaction=True)
def test_scoring_reads_and_computes_before_the_one_short_transaction_that_stores():
    """Issue 23 item 6: BERTScore and the mixed model ran inside one transaction that could last
    minutes. Every read (answers, rationales, Gen-U) now happens before it; the transaction holds
    the writes only: the unit scores and the finished run, and the three short reads beside them:
    the study's row, locked, and its latest done run (a run asked for later and done first
    supersedes this one: ``runs.score_run_store_lock``), then the run's own row, locked, whose
    requester is checked again where the results are written (``runs.score_run_requester_check``)."""
    from django.db import connection

    from tests.work import open_utility_study, work

    study = open_utility_study(name="short-tx", n_items=2, n_sources=1, quota=1)
    work(study, "SHORTTX00000000000000001")
    queries = []

    def record(execute, sql, params, many, context):
        queries.append((sql.split()[0].upper(), connection.in_atomic_block, sql))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    inside = [(verb, sql) for verb, atomic, sql in queries if atomic]
    reads = [sql for verb, sql in inside if verb == "SELECT"]
    assert len(reads) == 3, reads
    assert 'FROM "studies_study" WHERE "studies_study"."id" = ' in reads[0], reads
    assert 'FROM "scoring_scorerun"' in reads[1] and '"scoring_scorerun"."study_id" = ' in reads[1], reads
    assert 'FROM "scoring_scorerun"' in reads[2] and 'WHERE "scoring_scorerun"."id" = ' in reads[2], reads
    assert any(verb == "INSERT" and "scoring_unitscore" in sql for verb, sql in inside)
    assert any(verb == "UPDATE" and "scoring_scorerun" in sql for verb, sql in inside)
    outside = [sql for verb, atomic, sql in queries if not atomic and verb == "SELECT"]
    assert any("annotations_annotation" in sql for sql in outside)
    assert any("studies_rationale" in sql for sql in outside)
    assert UnitScore.objects.filter(study=study).count() == 2


def _figure_4_study(utility_study):
    """A generalization study on items 0 and 1 with good-lm, whose original rationale of item 0 a
    utility study scored not useful (wrong before and after) and that of item 1 nobody scored.
    Item 0: the counterfactual goes wrong -> right (3 answers); the rephrase ties 2-2 before and
    is right after (4 answers). Item 1: its rephrase is right before and after (3 answers)."""
    study, items, good, _ = utility_study
    collect(study, make_unit(study, items[0], good), [("no", "no")] * 5)
    study_score(study=study, similarity=False)
    gen_study = StudyFactory(kind=Study.Kind.GENERALIZATION, dataset=study.dataset, annotators_per_unit=3)
    gen_study.items.add(items[0], items[1])
    cf = GeneralizationQuestionFactory(item=items[0], qtype=GeneralizationQuestion.Type.COUNTERFACTUAL, answer="no")
    rp = GeneralizationQuestionFactory(item=items[0], qtype=GeneralizationQuestion.Type.REPHRASE, answer="yes")
    rp1 = GeneralizationQuestionFactory(item=items[1], qtype=GeneralizationQuestion.Type.REPHRASE, answer="yes")
    collect(gen_study, make_unit(gen_study, items[0], good, quota=3, gq=cf), [("yes", "no")] * 3)
    collect(gen_study, make_unit(gen_study, items[0], good, quota=4, gq=rp), [("yes", "yes")] * 2 + [("no", "yes")] * 2)
    collect(gen_study, make_unit(gen_study, items[1], good, quota=3, gq=rp1), [("yes", "yes")] * 3)
    return gen_study


def test_figure_4_names_its_aggregation_and_gives_the_per_answer_reading_with_its_ties(utility_study, tmp_path):
    """SPEC section 4 says only accuracy(after) - accuracy(before): Figure 4 takes each unit's
    majority (a tie wrong), says so, and gives the per-answer reading and the ties next to it, in
    results.json, the report and generalization.csv."""
    import csv

    from scoring.reports.sections import generalization_section
    from scoring.services import score_run_export

    run = study_score(study=_figure_4_study(utility_study))

    assert run.status == ScoreRun.Status.DONE, run.error
    gen = run.results["generalization"]
    assert gen["aggregation"]["rule"].startswith("per unit") and "tie counts as wrong" in gen["aggregation"]["rule"]
    assert gen["aggregation"]["other_reading"].startswith("per answer")
    everything = gen["all"]
    # by majority: before 1 of 3 units right (the rephrase's tie counts wrong), after 3 of 3
    assert (everything["accuracy_before"], everything["accuracy_after"]) == (pytest.approx(1 / 3), 1.0)
    assert (everything["ties_before"], everything["ties_after"]) == (1, 0)
    # per answer: before 0 + 2 + 3 of 10 answers, after all 10
    assert (everything["n_answers_before"], everything["n_answers_after"]) == (10, 10)
    assert everything["accuracy_before_per_answer"] == pytest.approx(0.5)
    assert everything["accuracy_after_per_answer"] == 1.0 and everything["delta_per_answer"] == pytest.approx(0.5)
    rephrase = gen["by_type"]["rephrase"]
    assert (rephrase["accuracy_before"], rephrase["accuracy_before_per_answer"], rephrase["ties_before"]) == (
        0.5, pytest.approx(5 / 7), 1)

    section = generalization_section(run.results)
    notes = " ".join(section.notes)
    assert "Accuracy per unit: a unit is answered right when its annotators' majority" in notes
    assert "per answer: before 0.500, after 1.000, after − before 0.500 (10 answers), against 0.667 by majority " \
           "with 1 ties before and 0 after counted wrong" in notes
    by_type = {r["key"]: r for r in next(t for t in section.tables if t.name == "generalization_by_type").rows}
    assert by_type["rephrase"]["delta_per_answer"] == pytest.approx(2 / 7) and by_type["rephrase"]["ties"] == "1, 0"

    written = {p.name: p for p in score_run_export(run=run, out_dir=tmp_path)}
    rows = list(csv.DictReader(written["generalization.csv"].open(encoding="utf-8")))
    rephrase_row = next(r for r in rows if (r["group"], r["key"]) == ("by_type", "rephrase"))
    assert float(rephrase_row["delta_per_answer"]) == pytest.approx(2 / 7) and rephrase_row["ties_before"] == "1"
    assert {r["note"] for r in rows} == {
        f"questions: {gen['question_filter']}; accuracy {gen['aggregation']['rule']}; the other reading, accuracy "
        f"{gen['aggregation']['other_reading']}. {bootstrap_note(run.results)}"}


def test_consistency_names_its_bundles_and_gives_spec_bundles_with_the_item_itself(utility_study):
    """SPEC section 5: a bundle is an item with all its generalization questions. The questions-only
    bundles say that they leave the item out; SPEC's bundles add the item's own outcome where the
    lending utility study has it (item 0, wrong after: its bundle is no longer consistent)."""
    from scoring.reports.sections import consistency_section

    run = study_score(study=_figure_4_study(utility_study))

    consistency = run.results["generalization"]["consistency"]
    questions = consistency["all_generalization_questions"]
    assert "the item itself is left out" in questions["bundle"]
    assert (questions["after"]["n_bundles"], questions["after"]["consistency"]) == (2, 1.0)
    spec = consistency["item_with_generalization_questions"]
    assert spec["bundle"].startswith("the item with all its generalization questions (SPEC section 5)")
    assert (spec["n_bundles_with_item"], spec["n_bundles_without_item"]) == (1, 1)
    after = spec["after"]
    # item 0: counterfactual, rephrase right, the item itself wrong; item 1: its rephrase right
    assert (after["n_bundles"], after["n_instances"], after["accuracy"], after["consistency"]) == (2, 4, 0.75, 0.5)
    # one bundle of size 3 and one of size 1: RC on the larger, with that subset's figures
    assert (after["rc_bundle_size"], after["rc_n_bundles"], after["rc_accuracy"], after["rc_consistency"]) == (
        3, 1, pytest.approx(2 / 3), 0.0)
    assert set(after["rc_by_bundle_size"]) == {"1", "3"}
    assert "the largest" in after["rc_size_rule"]
    assert "item itself" not in consistency["item_with_counterfactuals"]["bundle"]
    assert consistency["item_with_counterfactuals"]["after"]["consistency"] == 0.0

    section = consistency_section(run.results)
    rows = {(r["bundles"], r["step"]): r for r in section.tables[0].rows}
    assert rows[("item with generalization questions", "after")]["rc_accuracy"] == pytest.approx(2 / 3)
    assert rows[("item with generalization questions", "after")]["rc_n"] == 1
    by_size = next(t for t in section.tables if t.name == "consistency_by_bundle_size").rows
    assert {(r["bundles"], r["step"], r["size"]) for r in by_size} >= {
        ("item with generalization questions", "after", 1), ("item with generalization questions", "after", 3)}
    notes = " ".join(section.notes)
    assert f"Bundles \"all generalization questions\": {questions['bundle']}." in notes
    assert "(1 bundles with the item's outcome, 1 without)" in notes
    assert "computed on the most common bundle size; between sizes equally common, the largest" in notes


def test_rationales_another_backend_made_under_the_same_model_name_are_counted_apart(utility_study):
    """A source switched from a local model to an endpoint serving a model of the same name keeps its
    name and model: the backend each rationale records tells them apart (``GENERATION_KEYS``)."""
    from scoring.reports.sections import utility_section

    study, items, _good, _bad = utility_study
    lm = RationaleSourceFactory(name="gpt-lm", kind="lm", backend="openai", model_name_or_path="gpt2",
                                endpoint_url="https://llm.example/v1")
    made = {"model": "gpt2", "decoding": {"do_sample": False}, "template": "causal_few_shot", "seed": 0}
    for k, item in enumerate(items):
        RationaleFactory(item=item, source=lm, generation_info={**made, "backend": "causal" if k < 2 else "openai"})
    study.sources.add(lm)
    study.items.add(*items)
    collect(study, make_unit(study, items[0], lm), [("no", "yes")] * 5)

    run = study_score(study=study, similarity=False)

    rows = run.results["sources"]["gpt-lm"]["generation"]
    assert sorted((row["backend"], row["n_rationales"]) for row in rows) == [("causal", 2), ("openai", len(items) - 2)]
    line = next(note for note in utility_section(run.results).notes if note.startswith("Source gpt-lm:"))
    assert "2 made with backend causal, model gpt2" in line and "made with backend openai, model gpt2" in line


def test_rationales_made_on_another_endpoint_api_device_or_dtype_are_counted_apart_and_named(utility_study):
    """What each rationale records of where and how it ran (``backend_run_info``: the endpoint and its
    api; the device, dtype and library versions of a local model) changes the outputs: rationales
    differing there are rows apart (``GENERATION_RUN_KEYS``), and the report names each. The endpoint
    is shown without credentials, query or fragment."""
    from scoring.reports.sections import utility_section

    study, items, _good, _bad = utility_study
    lm = RationaleSourceFactory(name="llama", kind="lm", backend="openai", model_name_or_path="llama-3-8b",
                                endpoint_url="https://b.example/v1")
    made = {"backend": "openai", "model": "llama-3-8b", "decoding": {"do_sample": False}, "template": "causal",
            "seed": 0}
    runs = [{"endpoint_url": "https://user:secret@a.example/v1?key=k1#x", "api": "completions", "device": "cuda"},
            {"endpoint_url": "https://b.example/v1", "api": "chat", "device": "cpu"},
            {"backend": "causal", "endpoint_url": "", "device": "cuda:0", "dtype": "bfloat16", "torch": "2.13.0",
             "transformers": "4.99.0"}]
    for k, item in enumerate(items):  # the local rationales ran on two GPUs of a worker: one row
        info = {**made, **runs[min(k, 2)]}
        RationaleFactory(item=item, source=lm,
                         generation_info={**info, "device": "cuda:1"} if k == len(items) - 1 else info)
    study.sources.add(lm)
    study.items.add(*items)
    collect(study, make_unit(study, items[0], lm), [("no", "yes")] * 5)

    run = study_score(study=study, similarity=False)

    rows = run.results["sources"]["llama"]["generation"]
    assert sorted((row["endpoint_url"] or "", row["api"] or "", row["device"], row["n_rationales"]) for row in rows) == [
        ("", "", "cuda", len(items) - 2), ("https://a.example/v1", "completions", "cuda", 1),
        ("https://b.example/v1", "chat", "cpu", 1)]
    line = next(note for note in utility_section(run.results).notes if note.startswith("Source llama:"))
    assert "endpoint https://a.example/v1, api completions, device cuda" in line
    assert "endpoint https://b.example/v1, api chat, device cpu" in line
    assert "device cuda, dtype bfloat16, torch 2.13.0, transformers 4.99.0" in line
    assert "secret" not in json.dumps(run.results) and "k1" not in json.dumps(run.results)
    assert endpoint_shown("http://[::1]:8000/v1?key=k#f") == "http://[::1]:8000/v1"  # IPv6 keeps its brackets


def test_consistency_says_when_specs_bundle_cannot_be_formed(utility_study):
    """Without the original items' outcomes (nobody scored them) only the questions-only bundles
    are given, and the report says why SPEC's are not."""
    from scoring.reports.sections import consistency_section

    study, items, good, _ = utility_study
    gen_study = StudyFactory(kind=Study.Kind.GENERALIZATION, dataset=study.dataset, annotators_per_unit=3)
    gen_study.items.add(items[0])
    rp = GeneralizationQuestionFactory(item=items[0], qtype=GeneralizationQuestion.Type.REPHRASE, answer="yes")
    collect(gen_study, make_unit(gen_study, items[0], good, quota=3, gq=rp), [("yes", "yes")] * 3)

    run = study_score(study=gen_study)

    assert set(run.results["generalization"]["consistency"]) == {"all_generalization_questions"}
    assert "SPEC section 5's bundle, the item with all its generalization questions, is not given" in " ".join(
        consistency_section(run.results).notes)


def test_results_name_each_source_and_what_its_rationales_were_made_with(utility_study):
    """``results["sources"]``: what each source is and the distinct (model, decoding, template,
    seed) its rationales record, with counts, read in one grouped query; the report prints a
    line per source."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scoring.reports.sections import utility_section

    study, items, good, bad = utility_study
    lm = RationaleSourceFactory(name="t5-lm", kind="lm", backend="seq2seq", model_name_or_path="/models/t5",
                                training={"preset": "paper", "mode": "rationalizer"})
    made = {"model": "/models/t5", "decoding": {"do_sample": False, "max_new_tokens": 100}, "template": "t5_explain",
            "template_text": "explain {question}", "job_id": 7}
    for k, item in enumerate(items):
        RationaleFactory(item=item, source=lm, generation_info={**made, "seed": 0 if k < 3 else 1})
    study.sources.add(lm)
    study.items.add(*items)
    collect(study, make_unit(study, items[0], lm), [("no", "yes")] * 5)
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5, start=5)

    with CaptureQueriesContext(connection) as queries:
        run = study_score(study=study, similarity=False)

    sources = run.results["sources"]
    combo = {"backend": None, **{k: made[k] for k in ("model", "decoding", "template")}}  # no backend recorded
    # What a seed and a template name do not tell apart: the demonstrations and the template's text.
    hashes = {"demonstrations_hash": None, "template_text_hash": generation_hash("explain {question}")}
    # Rationales made before the demonstrations' content and the checkpoint were recorded: None, grouped as before.
    hashes |= {"demonstrations_fingerprint": None, "checkpoint_hash": None, "checkpoint_replaced": None}
    hashes |= dict.fromkeys(GENERATION_RUN_KEYS)  # nor where and how they ran
    now = generation_hash([json_fingerprint({"preset": "paper", "mode": "rationalizer"})])  # its checkpoint now
    assert sources["t5-lm"] == {
        "kind": "lm", "backend": "seq2seq", "model_name_or_path": "/models/t5", "training_preset": "paper",
        "training_mode": "rationalizer", "training_method": None, "checkpoint_hash": now,
        "generation": [{**combo, "seed": 0, **hashes, "n_rationales": 3},
                       {**combo, "seed": 1, **hashes, "n_rationales": 1}]}
    assert set(sources) == {"t5-lm", "good-lm"}  # good-lm: a unit's source, though not in the design
    assert sources["good-lm"]["generation"] == [
        {"backend": None, "model": None, "decoding": None, "template": None, "seed": None, "demonstrations_hash": None,
         "template_text_hash": None, "demonstrations_fingerprint": None, "checkpoint_hash": None,
         "checkpoint_replaced": None, **dict.fromkeys(GENERATION_RUN_KEYS), "n_rationales": 4}]
    reads = [q["sql"] for q in queries.captured_queries if "generation_info" in q["sql"]]
    assert len(reads) == 1 and "GROUP BY" in reads[0] and '"text"' not in reads[0]
    notes = utility_section(run.results).notes
    assert ("Source t5-lm: lm, seq2seq backend, model /models/t5, trained with fine-tuning preset paper, mode "
            f"rationalizer; it loads checkpoint {now} now. Rationales: 3 made with model /models/t5, template t5_explain, decoding "
            '{"do_sample": false, "max_new_tokens": 100}, seed 0; 1 made with model /models/t5, template t5_explain, '
            'decoding {"do_sample": false, "max_new_tokens": 100}, seed 1.') in notes
    assert "Source good-lm: imported. Rationales: 4 with no generation record (imported or gold)." in notes


def test_faithfulness_names_the_task_backend_and_the_method_and_prompt_where_stored(utility_study):
    from scoring.reports.sections import faithfulness_section

    study, items, good = _faithfulness_study(utility_study)
    for k, it in enumerate(items):
        r = it.rationales.get(source=good)
        r.faithfulness = {"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3, "y_hat": "yes", "y_hat_from": "full",
                          "task_model": "/models/task", "task_backend": "classifier", "job_id": 1}
        if k == 3:  # a job that records its scoring method and prompt
            r.faithfulness.update(task_model="/models/t5", task_backend="seq2seq", method="label log-prob softmax",
                                  prompt="answer {question}")
        r.save()
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)

    run = study_score(study=study, similarity=False)

    assert run.results["faithfulness"]["per_source"]["good-lm"]["computed_with"] == [
        {"task_model": "/models/task", "task_backend": "classifier", "method": None, "prompt": None,
         "checkpoint": None, "imported_from": None, "n_rationales": 3},
        {"task_model": "/models/t5", "task_backend": "seq2seq", "method": "label log-prob softmax",
         "prompt": "answer {question}", "checkpoint": None, "imported_from": None, "n_rationales": 1}]
    section = faithfulness_section(run.results)
    assert section.tables[0].rows[0]["computed_by"] == (
        "/models/task (backend classifier; 3 rationales), /models/t5 (backend seq2seq; method label log-prob "
        "softmax; prompt answer {question}; 1 rationales)")
    assert any("do not record how /models/task scored the labels" in note for note in section.notes)


@pytest.mark.parametrize("owner_reads_the_answerer", [True, False])
def test_gen_u_names_an_answerers_training_only_from_a_source_the_owner_may_read(utility_study, owner_reads_the_answerer):
    """The answerers' fine-tuning settings come from a source with their model path that the
    study's owner may read (``sources_for_user``): another researcher's fine-tuned source with the
    same path does not put her training settings into this study's results."""
    from django.contrib.auth.models import Permission

    from studies.services.questions import generalization_questions_set_validation
    from tests.cockpit.conftest import staff_client

    study, items, good, _ = utility_study
    owner, _client = staff_client("bob-owner")
    owner.user_permissions.remove(*Permission.objects.filter(codename="view_rationalesource"))
    if owner_reads_the_answerer:
        owner.user_permissions.add(Permission.objects.get(codename="view_rationalesource"))
    Study.objects.filter(pk=study.pk).update(owner=owner)
    study.refresh_from_db()
    RationaleSourceFactory(name="alice-ft", kind="lm", backend="seq2seq", model_name_or_path="shared/ckpt",
                           training={"preset": "ALICE-PRESET", "overrides": [], "data": {"dataset": "alice-ds"}})
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    q = GeneralizationQuestionFactory(item=items[0], text="q?", answer="yes")
    generalization_questions_set_validation(questions=[q], status="valid")
    predict(q, good, "I", False, model="shared/ckpt")
    predict(q, good, "IR", True, model="shared/ckpt")

    gen_u = study_score(study=study, similarity=False).results["gen_u"]

    fi = gen_u["answerers"]["F^I"][0]
    if owner_reads_the_answerer:
        assert fi["fine_tuning_preset"] == "ALICE-PRESET" and "ALICE-PRESET" in gen_u["method"]
    else:
        assert fi["fine_tuning_preset"] is None and fi["training"] == {} and fi["trained_on"] is None
        assert "ALICE-PRESET" not in str(gen_u) and "alice-ds" not in str(gen_u)
        assert "training not recorded" in gen_u["method"]
