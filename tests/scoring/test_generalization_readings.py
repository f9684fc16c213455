"""Which counted answers a generalization study's figures rest on is a choice SPEC leaves open, as
for a utility study: tasks that failed every attention check, tasks nobody reviewed, units a
researcher accepted a flag on and speeding tasks all count in Figure 4. The results give the other
readings (``counted_answers.other_readings``) for a generalization study too: each with its rule,
the answers it keeps and leaves out, and Figure 4 (accuracy before, after and its change over all
units, by type, by utility, by source), the consistency of the answers and agreement recomputed on
the answers it keeps; the report prints them. Built through the questionnaire's services
(``tests.scoring.test_other_readings._task``) and the review's (``assignment_approve``, ``flag_accept``)."""
from __future__ import annotations

import pytest

from annotations.services.flags import flag_accept
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_approve
from scoring.models import ScoreRun
from scoring.reports.sections import generalization_section
from scoring.services import study_score
from scoring.services.score import READING_RULES
from studies.models import GeneralizationQuestion, Study
from tests.factories import GeneralizationQuestionFactory, StudyFactory
from tests.scoring.test_other_readings import _check, _task
from tests.scoring.test_services_score import collect, make_unit

pytestmark = pytest.mark.django_db

READINGS = {"without_tasks_failing_any_check", "without_tasks_failing_every_check", "approved_tasks_only",
            "without_units_with_accepted_flags", "without_speeding_tasks", "without_blocked_workers"}


def _generalization_study(utility_study):
    """A generalization study on item 0 with good-lm, whose original rationale a utility study
    scored useful. The counterfactual (answer "no"): two approved tasks go wrong -> right, two
    unreviewed tasks that failed every attention check stay wrong after, so after ties 2-2 and
    counts wrong (published change 0; without those tasks 1). The rephrase (answer "yes"): two
    approved tasks go wrong -> right and an unreviewed one that failed one check of two goes
    right -> wrong (change 1 either way). Returns (study, counterfactual unit, rephrase unit)."""
    study, items, good, _ = utility_study
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    assert study_score(study=study, similarity=False).status == ScoreRun.Status.DONE
    gen_study = StudyFactory(kind=Study.Kind.GENERALIZATION, dataset=study.dataset, annotators_per_unit=4)
    gen_study.items.add(items[0])
    cf = GeneralizationQuestionFactory(item=items[0], qtype=GeneralizationQuestion.Type.COUNTERFACTUAL, answer="no")
    rp = GeneralizationQuestionFactory(item=items[0], qtype=GeneralizationQuestion.Type.REPHRASE, answer="yes")
    cf_unit = make_unit(gen_study, items[0], good, quota=4, gq=cf)
    rp_unit = make_unit(gen_study, items[0], good, quota=4, gq=rp)
    c1, c2 = _check(gen_study, 1), _check(gen_study, 2)
    passed, every_wrong, one_wrong = [(c1, "no"), (c2, "no")], [(c1, "yes"), (c2, "yes")], [(c1, "yes"), (c2, "no")]
    for unit, answers in ((cf_unit, ("yes", "no")), (rp_unit, ("no", "yes"))):
        for _ in range(2):
            assignment_approve(user=OPERATOR, study=gen_study,
                               assignment=_task(gen_study, unit, *answers, checks=passed))
    for _ in range(2):
        _task(gen_study, cf_unit, "yes", "yes", checks=every_wrong)
    _task(gen_study, rp_unit, "yes", "no", checks=one_wrong)
    return gen_study, cf_unit, rp_unit


def test_a_generalization_study_gives_the_other_readings_of_which_answers_count(utility_study):
    gen_study, _cf_unit, _rp_unit = _generalization_study(utility_study)

    run = study_score(study=gen_study)

    assert run.status == ScoreRun.Status.DONE, run.error
    gen = run.results["generalization"]
    # published, unchanged: the failing tasks count, the counterfactual's 2-2 tie after counts wrong
    assert gen["by_type"]["counterfactual"]["accuracy_delta"] == 0.0
    assert gen["by_type"]["rephrase"]["accuracy_delta"] == 1.0
    assert gen["all"]["accuracy_delta"] == 0.5 and run.results["ties"]["after"] == 1
    counted = run.results["counted_answers"]
    assert counted["tasks_failing_an_attention_check"] == 3
    readings = counted["other_readings"]
    assert set(readings) == READINGS
    assert {name: row["rule"] for name, row in readings.items()} == {name: READING_RULES[name] for name in READINGS}
    assert {name: (row["n_answers"], row["answers_left_out"]) for name, row in readings.items()} == {
        "without_tasks_failing_any_check": (8, 6), "without_tasks_failing_every_check": (10, 4),
        "approved_tasks_only": (8, 6), "without_units_with_accepted_flags": (14, 0),
        "without_speeding_tasks": (14, 0), "without_blocked_workers": (14, 0)}

    every = readings["without_tasks_failing_every_check"]
    assert every["identical_to"] is None and every["n_units_scored"] == 2
    figures = every["generalization"]
    assert set(figures) == {"all", "by_type", "by_utility", "by_source", "consistency"}
    assert figures["by_type"]["counterfactual"]["accuracy_delta"] == 1.0  # the tie is gone
    assert figures["by_type"]["counterfactual"]["n_answers_after"] == 2
    assert figures["all"]["accuracy_delta"] == 1.0 and figures["by_source"]["good-lm"]["accuracy_delta"] == 1.0
    assert figures["by_utility"]["useful"]["accuracy_delta"] == 1.0  # the original rationale's utility, as published
    assert every["ties"]["after"] == 0
    questions = figures["consistency"]["all_generalization_questions"]
    assert questions["after"]["consistency"] == 1.0
    assert gen["consistency"]["all_generalization_questions"]["after"]["consistency"] == 0.0
    assert every["agreement"]["after"]["n_annotations"] == 5

    anyr = readings["without_tasks_failing_any_check"]
    assert anyr["generalization"]["all"]["accuracy_delta"] == 1.0 and anyr["agreement"]["after"]["n_annotations"] == 4
    # the approved tasks are those that passed every check: the same answers, named, with the same figures
    approved = readings["approved_tasks_only"]
    assert approved["identical_to"] == "without_tasks_failing_any_check"
    assert approved["generalization"] == anyr["generalization"]
    # nothing flagged, nothing timed, nobody blocked
    for name in ("without_units_with_accepted_flags", "without_speeding_tasks", "without_blocked_workers"):
        assert readings[name]["identical_to"] == "published"
        assert readings[name]["generalization"]["all"] == gen["all"]
        assert readings[name]["generalization"]["by_type"] == gen["by_type"]

    notes = " ".join(generalization_section(run.results).notes)
    assert ("Other reading, without the tasks that failed every attention check: 4 answers left out, 2 units scored; "
            "Figure 4 accuracy over all units before 0.000, after 1.000, after − before 1.000 (after − before by "
            "source: good-lm 1.000); consistency over an item's questions before 0.000, after 1.000") in notes
    assert ("Other reading, approved tasks only (the same answers as without the tasks that failed any attention "
            "check): 6 answers left out") in notes
    assert "Other reading, without the speeding tasks: the same answers as published" in notes
    assert "useful" not in notes.split("Other reading", 1)[1]  # no utility figures for a generalization study


def _flagged_task(study, unit, before, after):
    """One new worker's task on ``unit`` whose first answer flags the question, through the
    questionnaire's services (as ``_task`` places its claim), submitted."""
    from datetime import timedelta

    from django.db.models import F
    from django.utils import timezone

    from annotations.models import Assignment, Claim, Participant, Unit
    from annotations.services.answers import annotation_submit, assignment_submit

    participant = Participant.objects.create(platform="link", external_id="flagger")
    task = Assignment.objects.create(study=study, participant=participant, expires_at=timezone.now() + timedelta(hours=1))
    claim = Claim.objects.create(assignment=task, unit=unit, study=study, participant=participant,
                                 question_key=unit.question_key, position=0)
    Unit.objects.filter(pk=unit.pk).update(n_claimed=F("n_claimed") + 1)
    flag = annotation_submit(assignment=task, claim=claim, step="before", answer=before,
                             payload={"flag": True, "flag_note": "the question is ambiguous"})
    annotation_submit(assignment=task, claim=claim, step="after", answer=after)
    assignment_submit(assignment=task)
    return flag


def test_the_reading_without_flagged_units_leaves_out_every_unit_asking_the_flagged_question(utility_study):
    """A flag accepted on a first answer concerns the generalization question under every source
    (``ACCEPTED_FLAG_SCOPE``): the published figures still count the rephrase; its reading leaves
    every answer to it out."""
    gen_study, _cf_unit, rp_unit = _generalization_study(utility_study)
    flag_accept(annotation=_flagged_task(gen_study, rp_unit, "no", "yes"), user=OPERATOR)

    run = study_score(study=gen_study)

    assert run.status == ScoreRun.Status.DONE, run.error
    assert run.results["generalization"]["by_type"]["rephrase"]["n_answers_after"] == 4  # still counted
    assert run.results["counted_answers"]["answers_in_units_with_accepted_flags"] == 8
    reading = run.results["counted_answers"]["other_readings"]["without_units_with_accepted_flags"]
    assert (reading["n_answers"], reading["answers_left_out"], reading["identical_to"]) == (8, 8, None)
    assert set(reading["generalization"]["by_type"]) == {"counterfactual"} and reading["n_units_scored"] == 1
    assert reading["generalization"]["all"]["accuracy_delta"] == 0.0
    assert run.results["generalization"]["all"]["accuracy_delta"] == 0.5
    assert any("without_units_with_accepted_flags gives the figures without them" in w
               for w in run.results["warnings"])
