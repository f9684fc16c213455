"""SPEC section 5: a bundle is consistent when every instance in it is answered correctly. A
generalization study's bundle is every question of it that counts, answered or not: a bundle with
a question nobody has answered yet (incomplete) is left out of consistency and relative consistency
and counted, the rule is named, and the figures with each incomplete bundle counted as not
consistent are given beside it; the report prints both. Built through the questionnaire's services
(``tests.scoring.test_services_score.collect``) and ``study_score``."""
from __future__ import annotations

import pytest

from scoring.models import ScoreRun
from scoring.reports.sections import consistency_section
from scoring.services import score, study_score
from studies.models import GeneralizationQuestion, Study
from tests.factories import GeneralizationQuestionFactory, StudyFactory
from tests.scoring.test_services_score import collect, make_unit

pytestmark = pytest.mark.django_db

Type = GeneralizationQuestion.Type
RIGHT, WRONG_TO_RIGHT, WRONG = [("yes", "yes")] * 3, [("no", "yes")] * 3, [("no", "no")] * 3


def _study_with_an_unanswered_question(utility_study):
    """A generalization study (3 annotators a unit, good-lm) on items 0-2, whose original items a
    utility study scored right before and after. Item 0: right/right, wrong -> right, wrong/wrong;
    item 1: two questions right/right; item 2: its counterfactual and rephrase wrong -> right, its
    similar question has a unit and no answers."""
    study, items, good, _ = utility_study
    for item in items[:3]:
        collect(study, make_unit(study, item, good), [("yes", "yes")] * 5)
    assert study_score(study=study, similarity=False).status == ScoreRun.Status.DONE
    gen_study = StudyFactory(kind=Study.Kind.GENERALIZATION, dataset=study.dataset, annotators_per_unit=3)
    gen_study.items.add(*items[:3])
    plan = {items[0]: [(Type.REPHRASE, RIGHT), (Type.COUNTERFACTUAL, WRONG_TO_RIGHT), (Type.SIMILAR, WRONG)],
            items[1]: [(Type.REPHRASE, RIGHT), (Type.SIMILAR, RIGHT)],
            items[2]: [(Type.COUNTERFACTUAL, WRONG_TO_RIGHT), (Type.REPHRASE, WRONG_TO_RIGHT), (Type.SIMILAR, None)]}
    for item, questions in plan.items():
        for qtype, answers in questions:
            question = GeneralizationQuestionFactory(item=item, qtype=qtype, answer="yes")
            unit = make_unit(gen_study, item, good, quota=3, gq=question)
            if answers:
                collect(gen_study, unit, answers)
    return gen_study


def test_a_bundle_with_an_unanswered_question_is_left_out_of_consistency_and_counted(utility_study):
    run = study_score(study=_study_with_an_unanswered_question(utility_study))

    assert run.status == ScoreRun.Status.DONE, run.error
    consistency = run.results["generalization"]["consistency"]
    questions = consistency["all_generalization_questions"]
    after = questions["after"]
    # item 0 (3 questions, one wrong after) and item 1 (2 right): item 2 is incomplete, not consistent
    assert (after["n_bundles"], after["n_instances"], after["consistency"]) == (2, 5, 0.5)
    assert (questions["n_bundles_incomplete"], questions["n_questions_unanswered"]) == (1, 1)
    assert questions["incomplete_rule"] == score.BUNDLE_INCOMPLETE_RULES["left_out"]
    assert questions["before"]["consistency"] == 0.5  # item 1 only
    # the other reading: item 2's bundle counts, not consistent, at its full size of 3
    readings = questions["incomplete_bundles"]
    assert readings["default"] == "left_out" and set(readings["rules"]) == {"left_out", "counted_not_consistent"}
    other = readings["counted_not_consistent"]["after"]
    assert (other["n_bundles"], other["n_instances"], other["consistency"]) == (3, 8, pytest.approx(1 / 3))
    assert other["accuracy"] == pytest.approx(6 / 8)  # the unanswered question counts wrong
    # RC on the full bundle sizes: two bundles of size 3 (items 0 and 2), one of size 2
    assert (other["rc_bundle_size"], other["rc_n_bundles"]) == (3, 2)
    assert "2 bundles of size 3" in other["rc_note"]

    # SPEC's bundle, the item with all its questions: the same bundles with the item's own outcome
    spec = consistency["item_with_generalization_questions"]
    assert (spec["n_bundles_with_item"], spec["n_bundles_incomplete"]) == (3, 1)
    assert (spec["after"]["n_bundles"], spec["after"]["n_instances"], spec["after"]["consistency"]) == (2, 7, 0.5)
    spec_other = spec["incomplete_bundles"]["counted_not_consistent"]["after"]
    assert (spec_other["n_bundles"], spec_other["n_instances"]) == (3, 11)
    assert spec_other["consistency"] == pytest.approx(1 / 3) and spec_other["rc_bundle_size"] == 4
    # an item with its counterfactuals: item 2's counterfactual was answered, nothing incomplete
    counterfactuals = consistency["item_with_counterfactuals"]
    assert counterfactuals["n_bundles_incomplete"] == 0 and "counted_not_consistent" not in (
        counterfactuals["incomplete_bundles"])
    assert (counterfactuals["after"]["n_bundles"], counterfactuals["after"]["consistency"]) == (2, 1.0)

    assert any("1 bundles (an item's generalization questions with one source) have 1 questions with no completed "
               "answers yet: they are left out of consistency" in w for w in run.warnings)
    section = consistency_section(run.results)
    rows = {(r["bundles"], r["step"]): r for r in section.tables[0].rows}
    assert rows[("all generalization questions", "after")]["consistency"] == 0.5
    assert rows[("all generalization questions (incomplete bundles not consistent)", "after")]["consistency"] == (
        pytest.approx(1 / 3))
    notes = " ".join(section.notes)
    assert "1 bundles are incomplete (1 questions with no completed answers yet) and left out" in notes
    assert score.BUNDLE_INCOMPLETE_RULES["left_out"] in notes


def test_every_bundle_complete_gives_the_rule_and_no_other_figures(utility_study):
    """With every question answered the readings coincide: the rule and a count of 0, no figures."""
    study, items, good, _ = utility_study
    gen_study = StudyFactory(kind=Study.Kind.GENERALIZATION, dataset=study.dataset, annotators_per_unit=3)
    gen_study.items.add(items[0])
    rp = GeneralizationQuestionFactory(item=items[0], qtype=Type.REPHRASE, answer="yes")
    collect(gen_study, make_unit(gen_study, items[0], good, quota=3, gq=rp), RIGHT)

    run = study_score(study=gen_study)

    questions = run.results["generalization"]["consistency"]["all_generalization_questions"]
    assert questions["n_bundles_incomplete"] == 0 and questions["after"]["consistency"] == 1.0
    assert set(questions["incomplete_bundles"]) == {"default", "rules", "spec"}
    rows = consistency_section(run.results).tables[0].rows
    assert not any("incomplete" in r["bundles"] for r in rows)


def test_a_bundle_with_no_question_answered_keeps_the_items_own_outcome(utility_study):
    """The item's own outcome comes from the borrowed utility table for every bundle, not only for
    those with an answered question: item 1's counterfactual and rephrase have units and no answers,
    yet its bundles carry the item (scored right by the utility study) at their full size."""
    study, items, good, _ = utility_study
    for item in items[:2]:
        collect(study, make_unit(study, item, good), [("yes", "yes")] * 5)
    assert study_score(study=study, similarity=False).status == ScoreRun.Status.DONE
    gen_study = StudyFactory(kind=Study.Kind.GENERALIZATION, dataset=study.dataset, annotators_per_unit=3)
    gen_study.items.add(*items[:2])
    for item, answers in ((items[0], RIGHT), (items[1], None)):
        for qtype in (Type.COUNTERFACTUAL, Type.REPHRASE):
            unit = make_unit(gen_study, item, good, quota=3, gq=GeneralizationQuestionFactory(
                item=item, qtype=qtype, answer="yes"))
            if answers:
                collect(gen_study, unit, answers)

    run = study_score(study=gen_study)

    assert run.status == ScoreRun.Status.DONE, run.error
    consistency = run.results["generalization"]["consistency"]
    spec = consistency["item_with_generalization_questions"]
    assert (spec["n_bundles_with_item"], spec["n_bundles_without_item"], spec["n_bundles_incomplete"]) == (2, 0, 1)
    assert (spec["after"]["n_bundles"], spec["after"]["n_instances"], spec["after"]["consistency"]) == (1, 3, 1.0)
    # item 1's bundle at its full size of 3 (the item and its two unanswered questions), not consistent
    spec_other = spec["incomplete_bundles"]["counted_not_consistent"]["after"]
    assert (spec_other["n_bundles"], spec_other["n_instances"], spec_other["consistency"]) == (2, 6, 0.5)
    assert (spec_other["rc_bundle_size"], spec_other["rc_n_bundles"]) == (3, 2)
    # an item with its counterfactuals: item 1's counterfactual is unanswered, its bundle incomplete
    counterfactuals = consistency["item_with_counterfactuals"]
    assert (counterfactuals["n_bundles_incomplete"], counterfactuals["n_questions_unanswered"]) == (1, 1)
    assert (counterfactuals["after"]["n_bundles"], counterfactuals["after"]["n_instances"]) == (1, 2)
    cf_other = counterfactuals["incomplete_bundles"]["counted_not_consistent"]["after"]
    assert (cf_other["n_bundles"], cf_other["n_instances"], cf_other["consistency"]) == (2, 4, 0.5)
