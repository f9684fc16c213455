"""The Gen-U answerers' consistency (``gen_u["consistency"]``, SPEC section 5: a bundle is consistent
when every instance in it is answered correctly) rests on each answerer's own predictions: one
answerer's output that did not parse removes nothing from the other's. A bundle is every question of
the item that counts now; one with a question the answerer has no prediction of, or whose output did
not parse, is incomplete: left out and counted (``n_bundles_incomplete``) by default, as a human
bundle with an unanswered member is, and ``gen_u["consistency_incomplete_rules"]`` gives the other
reading, ``counted_not_consistent`` (those questions counted as wrong), beside it."""
from __future__ import annotations

import pytest

from annotations.models import Unit
from annotations.services.units import study_units_build
from scoring.models import ScoreRun, UnitScore
from scoring.reports.sections import gen_u_section
from scoring.services import study_score
from scoring.services.genu import BUNDLE_INCOMPLETE_SPEC
from studies.services.questions import generalization_questions_set_validation
from tests.factories import GeneralizationQuestionFactory
from tests.scoring.test_services_score import collect, predict

pytestmark = pytest.mark.django_db



def _scored(utility_study, answers: dict[int, list[tuple[bool | None, bool | None] | None]]):
    """A study of ``utility_study``'s good-lm on the items of ``answers``, each unit answered, and per
    item its validated generalization questions with (F^I right, F^IR right) predictions, None: the
    output did not parse (stored blank, as the answering job stores it); a question given None has
    no prediction (its Gen-U job ran before it was validated). Returns (run, items)."""
    study, items, good, _ = utility_study
    study.items.set(items[:len(answers)])
    study.sources.set([good])
    study_units_build(study=study)
    for unit in Unit.objects.filter(study=study):
        collect(study, unit, [("no", "yes")] * 5)
    questions = []
    for k, pairs in answers.items():
        for n, pair in enumerate(pairs):
            question = GeneralizationQuestionFactory(item=items[k], text=f"g{k}-{n}?", answer="yes")
            questions.append(question)
            if pair is None:
                continue
            i_ok, ir_ok = pair
            predict(question, good, "I", bool(i_ok), parsed=i_ok is not None)
            predict(question, good, "IR", bool(ir_ok), parsed=ir_ok is not None)
    generalization_questions_set_validation(questions=questions, status="valid")
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    return run, items


def _figures(entry: dict) -> tuple:
    return (entry["n_bundles"], entry["n_instances"], entry["accuracy"], entry["consistency"],
            entry["n_bundles_incomplete"], entry["n_answers_unparsed"], entry["n_questions_without_predictions"])


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
    assert _figures(consistency["F^I"]) == (2, 5, 0.8, 0.5, 0, 0, 0)
    # F^IR, by default: item 0's bundle has an answer that did not parse, so it is left out and counted;
    # item 1's (right, wrong) is not consistent.
    assert _figures(consistency["F^IR"]) == (1, 2, 0.5, 0.0, 1, 1, 0)
    # The human answers' reading names, rule and SPEC text.
    readings = gen_u["consistency_incomplete_rules"]
    assert "consistency_unparsed_rules" not in gen_u
    assert readings["default"] == "left_out"
    assert set(readings["rules"]) == {"left_out", "counted_not_consistent"}
    assert readings["incomplete_rule"] == readings["rules"]["left_out"]
    assert readings["spec"].startswith(BUNDLE_INCOMPLETE_SPEC)
    fir = readings["by_source"]["good-lm"]["F^IR"]
    assert fir["left_out"] == consistency["F^IR"]
    # Counted as not consistent, SPEC section 5's reading of the 5 instances: 3 right, no bundle all right.
    assert _figures(fir["counted_not_consistent"]) == (2, 5, 0.6, 0.0, 1, 1, 0)
    fi = readings["by_source"]["good-lm"]["F^I"]
    assert fi["left_out"] == fi["counted_not_consistent"] == consistency["F^I"]
    # The default is named where the figure is: in results.json and the report's note.
    bundle = gen_u["consistency_bundle"]
    assert "each answerer over its own predictions" in bundle
    assert "left out and counted (n_bundles_incomplete)" in bundle and "counted_not_consistent" in bundle
    assert f"The answerers' consistency (results.json, gen_u.consistency) is over bundles of {bundle}." in (
        gen_u_section(run.results).notes)


def test_one_answerers_unparsed_output_does_not_make_the_others_bundle_consistent(utility_study):
    # One bundle: F^I right, right, wrong; F^IR right, right, and a blank output on the third question.
    # Before, the third question went from both answerers' consistency and both read 1.0.
    run, _ = _scored(utility_study, {0: [(True, True), (True, True), (False, None)]})

    consistency = run.results["gen_u"]["consistency"]["good-lm"]
    assert (consistency["F^I"]["consistency"], consistency["F^IR"]["consistency"]) == (0.0, None)
    assert _figures(consistency["F^I"]) == (1, 3, pytest.approx(2 / 3), 0.0, 0, 0, 0)
    assert (consistency["F^IR"]["n_bundles"], consistency["F^IR"]["consistency"],
            consistency["F^IR"]["n_bundles_incomplete"]) == (0, None, 1)
    counted = run.results["gen_u"]["consistency_incomplete_rules"]["by_source"]["good-lm"]["F^IR"]
    assert _figures(counted["counted_not_consistent"]) == (1, 3, pytest.approx(2 / 3), 0.0, 1, 1, 0)


def test_a_question_that_counts_with_no_prediction_makes_its_bundle_incomplete(utility_study):
    # Item 0 has 3 validated questions; good-lm's Gen-U job ran before the third was validated, so
    # it has predictions (both answerers right) of 2. Before, the bundle was judged on those 2 and
    # read consistent (n_bundles 1, n_instances 2, consistency 1.0, nothing incomplete).
    run, _ = _scored(utility_study, {0: [(True, True), (True, True), None]})

    gen_u = run.results["gen_u"]
    assert gen_u["questions_answered"]["by_source"]["good-lm"]["n_questions_without_predictions"] == 1
    consistency = gen_u["consistency"]["good-lm"]
    for name in ("F^I", "F^IR"):
        # by default the bundle is incomplete: left out and counted, as an unparsed answer's is
        assert (consistency[name]["n_bundles"], consistency[name]["consistency"],
                consistency[name]["n_bundles_incomplete"]) == (0, None, 1)
        assert (consistency[name]["n_answers_unparsed"], consistency[name]["n_questions_without_predictions"]) == (0, 1)
        # the other reading: the missing answer counts as wrong, the bundle not consistent at its full size
        counted = gen_u["consistency_incomplete_rules"]["by_source"]["good-lm"][name]["counted_not_consistent"]
        assert _figures(counted) == (1, 3, pytest.approx(2 / 3), 0.0, 1, 0, 1)
