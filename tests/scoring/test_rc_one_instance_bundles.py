"""Relative consistency (SPEC section 5) is for bundles of 2 or more instances: a bundle of one is
consistent exactly when it is right, so consistency is accuracy there and RC is 1 by definition.
``pipeline.RC_SIZE_RULE`` picks the headline size among sizes of 2 or more; when every bundle has
one instance RC is not given and the reason is named (``rc_degenerate``), as U's cells of constant
utility are (``theils_u_degenerate``). Through ``pipeline.bundle_consistency`` and through a
generalization study built, answered and scored the way the app does (``make_study``, ``work``,
``study_score``), with the report's consistency section."""
from __future__ import annotations

import pandas as pd
import pytest

from scoring.metrics import pipeline, relative_consistency
from scoring.models import ScoreRun
from scoring.reports.sections import consistency_section, generalization_section
from scoring.services.score import study_score
from studies.models import Study
from tests.annotations.factories import make_study
from tests.scoring.test_validated_only_reading import _score_generalization
from tests.work import work

ONE_INSTANCE_TEXT = "every bundle has one instance: consistency is accuracy there and relative consistency would be 1"


def test_headline_rc_is_chosen_among_bundles_of_two_or_more():
    """6 bundles of size 1 and 3 of size 3: the most common size is 1, but RC is on the size-3 bundles."""
    correct = [True, True, True, False, True, False] + [True, True, True, True, True, False, False, True, True]
    bundles = ["s1", "s2", "s3", "s4", "s5", "s6"] + ["t1"] * 3 + ["t2"] * 3 + ["t3"] * 3
    out = pipeline.bundle_consistency(pd.Series(correct), pd.Series(bundles))

    assert (out["rc_bundle_size"], out["rc_n_bundles"], out["rc_accuracy"], out["rc_consistency"]) == (
        3, 3, pytest.approx(7 / 9), pytest.approx(1 / 3))
    assert out["relative_consistency"] == pytest.approx(relative_consistency(3, 7, 1, bundle_size=3))
    assert out["relative_consistency"] < 1.0
    assert "rc_degenerate" not in out
    assert "sizes of 1 are not considered" in out["rc_size_rule"]
    assert "bundles of size 1 are not considered" in out["rc_note"]
    # size 1 is still listed, its RC not given and why
    assert out["rc_by_bundle_size"]["1"] == {"n_bundles": 6, "accuracy": pytest.approx(4 / 6),
                                             "consistency": pytest.approx(4 / 6), "relative_consistency": None,
                                             "rc_degenerate": pipeline.RC_ONE_INSTANCE}


def test_rc_is_not_given_when_every_bundle_has_one_instance():
    out = pipeline.bundle_consistency(pd.Series([True, False, True, True]), pd.Series(["a", "b", "c", "d"]))

    assert (out["n_bundles"], out["accuracy"], out["consistency"]) == (4, 0.75, 0.75)
    assert out["relative_consistency"] is None
    assert out["rc_degenerate"] == pipeline.RC_ONE_INSTANCE
    assert (out["rc_bundle_size"], out["rc_n_bundles"], out["rc_accuracy"], out["rc_consistency"]) == (
        None, None, None, None)
    assert out["rc_size_rule"] == pipeline.RC_SIZE_RULE and "sizes of 1 are not considered" in out["rc_size_rule"]
    assert pipeline.rc_bundle_size(pd.Series([1, 1, 1])) is None
    assert pipeline.rc_bundle_size(pd.Series([1, 1, 1, 2])) == 2


@pytest.mark.django_db
def test_a_study_with_one_question_an_item_gives_no_rc_and_says_why():
    """Each item has one generalization question: every questions-only bundle has one instance."""
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=4, n_sources=1, n_genq=1, quota=2,
                       units_per_task=4)

    def answer(claim, step: str) -> str:  # right after on items 0 and 1, wrong otherwise
        right = claim.unit.generalization_question.answer
        item_index = int(claim.unit.item.question.rsplit(" ", 1)[-1].rstrip("?"))
        return right if step == "after" and item_index < 2 else ("no" if right == "yes" else "yes")

    for worker in ("5a9d64f5f6dfdd0001eaa711", "5a9d64f5f6dfdd0001eaa712"):
        work(study, worker, answer=answer)
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error

    questions = run.results["generalization"]["consistency"]["all_generalization_questions"]
    after = questions["after"]
    assert (after["n_bundles"], after["consistency"]) == (4, 0.5)
    assert after["relative_consistency"] is None and after["rc_degenerate"] == pipeline.RC_ONE_INSTANCE
    assert after["rc_bundle_size"] is None
    assert "sizes of 1 are not considered" in after["rc_size_rule"]

    section = consistency_section(run.results)
    row = {(r["bundles"], r["step"]): r for r in section.tables[0].rows}[("all generalization questions", "after")]
    assert row["relative_consistency"] is None and row["note"].startswith(ONE_INSTANCE_TEXT)
    notes = " ".join(section.notes)
    assert f"Relative consistency of \"all generalization questions\" (before, after): {ONE_INSTANCE_TEXT}" in notes
    assert "sizes of 1 are not considered" in notes


@pytest.mark.django_db
def test_the_validated_only_reading_with_one_question_an_item_gives_no_rc():
    """2 items x 2 questions, one of each validated: the published bundles have 2 questions (RC
    given), the validated-only reading's have 1 (RC not given, the reason named)."""
    run = _score_generalization()
    gen = run.results["generalization"]
    published = gen["consistency"]["all_generalization_questions"]["after"]
    assert published["rc_bundle_size"] == 2 and published["relative_consistency"] is not None
    validated = gen["unvalidated_questions"]["validated_only"]["consistency"]["all_generalization_questions"]
    for step in ("before", "after"):
        assert validated[step]["n_bundles"] == 2
        assert validated[step]["relative_consistency"] is None, step
        assert validated[step]["rc_degenerate"] == pipeline.RC_ONE_INSTANCE
    assert generalization_section(run.results).notes  # the report still renders
