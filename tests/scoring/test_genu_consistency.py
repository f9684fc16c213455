"""The Gen-U answerers' consistency (``gen_u["consistency"]``, SPEC section 5: a bundle is consistent
when every instance in it is answered correctly) rests on each answerer's own predictions: one
answerer's output that did not parse removes nothing from the other's. A bundle with an answer
that did not parse is incomplete: left out and counted (``n_bundles_incomplete``) by default, as a
human bundle with an unanswered member is, and ``gen_u["consistency_unparsed_rules"]`` gives the
other reading, that answer counted as wrong, beside it."""
from __future__ import annotations

import pytest

from annotations.models import Unit
from annotations.services.units import study_units_build
from scoring.models import ScoreRun, UnitScore
from scoring.reports.sections import gen_u_section
from scoring.services import study_score
from studies.services.questions import generalization_questions_set_validation
from tests.factories import GeneralizationQuestionFactory
from tests.scoring.test_services_score import collect, predict

pytestmark = pytest.mark.django_db

SPEC_SAYS = "SPEC does not say how an LM output that did not parse counts"


def _scored(utility_study, answers: dict[int, list[tuple[bool | None, bool | None]]]):
    """A study of ``utility_study``'s good-lm on the items of ``answers``, each unit answered, and per
    item its generalization questions with (F^I right, F^IR right) predictions, None: the output
    did not parse (stored blank, as the answering job stores it). Returns (run, items)."""
    study, items, good, _ = utility_study
    study.items.set(items[:len(answers)])
    study.sources.set([good])
    study_units_build(study=study)
    for unit in Unit.objects.filter(study=study):
        collect(study, unit, [("no", "yes")] * 5)
    questions = []
    for k, pairs in answers.items():
        for n, (i_ok, ir_ok) in enumerate(pairs):
            question = GeneralizationQuestionFactory(item=items[k], text=f"g{k}-{n}?", answer="yes")
            questions.append(question)
            predict(question, good, "I", bool(i_ok), parsed=i_ok is not None)
            predict(question, good, "IR", bool(ir_ok), parsed=ir_ok is not None)
    generalization_questions_set_validation(questions=questions, status="valid")
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    return run, items


def _figures(entry: dict) -> tuple:
    return (entry["n_bundles"], entry["n_instances"], entry["accuracy"], entry["consistency"],
            entry["n_bundles_incomplete"], entry["n_answers_unparsed"])


def test_an_unparsed_answer_leaves_its_bundle_out_as_incomplete_and_counts_as_wrong_in_the_other_reading(
        utility_study):
    # Item 0: F^I right on all 3 questions; F^IR right on 2, its third output blank (did not parse).
    # Item 1: s = +1 (F^I wrong, F^IR right) and -1 (F^I right, F^IR wrong).
    run, items = _scored(utility_study, {0: [(True, True), (True, True), (True, None)],
                                         1: [(False, True), (True, False)]})

    gen_u = run.results["gen_u"]
    # Gen-U itself is unchanged: item 0 scores 0 on its 2 complete questions, item 1 ties to the lowest (-1).
    assert {u.item_id: u.gen_u for u in UnitScore.objects.filter(study=run.study)} == {
        items[0].pk: 0, items[1].pk: -1}
    assert gen_u["n_questions"] == 4
    consistency = gen_u["consistency"]["good-lm"]
    assert (consistency["F^I"]["n_instances"], consistency["F^I"]["accuracy"], consistency["F^IR"]["n_bundles"]) == (
        5, 0.8, 1)
    # F^I answered all 5 questions and its answers count, F^IR's blank output on item 0 notwithstanding
    # (it was counted on 4 questions, accuracy 0.75, consistency 0.5 before).
    assert _figures(consistency["F^I"]) == (2, 5, 0.8, 0.5, 0, 0)
    # F^IR, by default: item 0's bundle has an answer that did not parse, so it is left out and counted;
    # item 1's (right, wrong) is not consistent.
    assert _figures(consistency["F^IR"]) == (1, 2, 0.5, 0.0, 1, 1)
    readings = gen_u["consistency_unparsed_rules"]
    assert readings["default"] == "incomplete_left_out"
    assert set(readings["rules"]) == {"incomplete_left_out", "counted_wrong"}
    assert readings["spec"].startswith(SPEC_SAYS)
    fir = readings["by_source"]["good-lm"]["F^IR"]
    assert fir["incomplete_left_out"] == consistency["F^IR"]
    # Counted as wrong, SPEC section 5's reading of the 5 instances: 3 right, no bundle all right.
    assert _figures(fir["counted_wrong"]) == (2, 5, 0.6, 0.0, 1, 1)
    fi = readings["by_source"]["good-lm"]["F^I"]
    assert fi["incomplete_left_out"] == fi["counted_wrong"] == consistency["F^I"]
    # The default is named where the figure is: in results.json and the report's note.
    bundle = gen_u["consistency_bundle"]
    assert "each answerer over its own predictions" in bundle
    assert "left out and counted (n_bundles_incomplete)" in bundle and "counted_wrong" in bundle
    assert f"The answerers' consistency (results.json, gen_u.consistency) is over bundles of {bundle}." in (
        gen_u_section(run.results).notes)


def test_one_answerers_unparsed_output_does_not_make_the_others_bundle_consistent(utility_study):
    # One bundle: F^I right, right, wrong; F^IR right, right, and a blank output on the third question.
    # Before, the third question went from both answerers' consistency and both read 1.0.
    run, _ = _scored(utility_study, {0: [(True, True), (True, True), (False, None)]})

    consistency = run.results["gen_u"]["consistency"]["good-lm"]
    assert (consistency["F^I"]["consistency"], consistency["F^IR"]["consistency"]) == (0.0, None)
    assert _figures(consistency["F^I"]) == (1, 3, pytest.approx(2 / 3), 0.0, 0, 0)
    assert (consistency["F^IR"]["n_bundles"], consistency["F^IR"]["consistency"],
            consistency["F^IR"]["n_bundles_incomplete"]) == (0, None, 1)
    counted_wrong = run.results["gen_u"]["consistency_unparsed_rules"]["by_source"]["good-lm"]["F^IR"]["counted_wrong"]
    assert _figures(counted_wrong) == (1, 3, pytest.approx(2 / 3), 0.0, 1, 1)
