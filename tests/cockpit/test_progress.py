"""Watch a study fill (issue 12): the live progress page, its JSON and the study list's completion.

Work is done through the questionnaire's services; every number of the page is checked against
what the answers table holds (the answers of the claims that count)."""
from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.db.models import F
from django.test import Client

from annotations.models import Annotation, Assignment, Unit
from annotations.selectors import claims_that_count
from annotations.selectors.review import study_workers
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_reject
from annotations.services.release import assignment_return
from studies.models import Platform
from tests.annotations.factories import AttentionCheckFactory
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def progress(client: Client, study) -> dict:
    response = client.get(f"/admin/studies/study/{study.pk}/progress.json")
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    return response.json()


def answers_table(study) -> int:
    """What the answers table holds: questions answered in full (before and after) by work that counts."""
    return Annotation.objects.filter(claim__in=claims_that_count(study=study), step="after").count()


def test_tasks_the_design_needs_follow_the_assignment_rule(dana):
    """Issue 11's design: 8 items x 3 sources x 5 workers in tasks of 10. No worker sees a
    question twice, so a task holds 8 and the quota needs 15 tasks (the page said 12)."""
    user, client = dana
    study = open_utility_study(name="wide", n_items=8, n_sources=3, quota=5, units_per_task=10, owner=user)
    page = progress(client, study)
    assert (page["units_total"], page["answers_to_collect"], page["tasks_planned"]) == (24, 120, 15)

def test_progress_counts_equal_the_answers_table(dana):
    user, client = dana
    study = open_utility_study(name="fill", n_items=3, n_sources=2, quota=2, units_per_task=3, owner=user)
    empty = progress(client, study)
    assert (empty["answers_collected"], empty["answers_to_collect"], empty["percent"]) == (0, 12, 0.0)
    assert (empty["units_total"], empty["units_empty"], empty["tasks_planned"]) == (6, 6, 4)

    work(study, "PID-A")  # 3 questions, submitted
    work(study, "PID-B", steps=3, submit=False)  # one question and a half, still working
    returned = work(study, "PID-C", submit=False)
    assignment_return(assignment=returned)
    now = progress(client, study)
    assert now["answers_collected"] == answers_table(study) == 3
    assert now["percent"] == 25.0
    assert sum(s["collected"] for s in now["by_source"]) == 3
    assert sum(s["to_collect"] for s in now["by_source"]) == 12
    assert now["units_complete"] == 0
    assert now["units_in_progress"] == len({*claimed_units(study, "PID-A"), *claimed_units(study, "PID-B")})
    assert now["units_empty"] == 6 - now["units_in_progress"]
    assert {k: now["tasks"][k] for k in ("in_progress", "submitted", "returned", "expired", "done")} == {
        "in_progress": 1, "submitted": 1, "returned": 1, "expired": 0, "done": 1}
    assert now["workers"] == 3

    work(study, "PID-D")
    work(study, "PID-E")
    later = progress(client, study)
    assert later["answers_collected"] == answers_table(study) == 9
    assert later["units_complete"] == Unit.objects.filter(study=study, n_completed__gte=F("quota")).count() > 0
    assert later["units_complete"] + later["units_in_progress"] + later["units_empty"] == 6


def claimed_units(study, worker: str) -> list[int]:
    return list(Assignment.objects.get(study=study, participant__external_id=worker, status__in=["active", "submitted"])
                .claims.values_list("unit_id", flat=True))


def test_a_full_study_reads_complete(dana):
    user, client = dana
    study = open_utility_study(name="full", n_items=2, n_sources=1, quota=2, units_per_task=2, owner=user)
    work(study, "PID-1")
    work(study, "PID-2")
    done = progress(client, study)
    assert (done["answers_collected"], done["answers_to_collect"], done["percent"]) == (4, 4, 100.0)
    assert (done["units_complete"], done["units_in_progress"], done["units_empty"]) == (2, 0, 0)
    assert done["by_source"] == [{"source_id": study.sources.get().pk, "name": "full-s0", "collected": 4,
                                  "to_collect": 4, "percent": 100.0}]


def test_attention_checks_and_reported_problems_are_counted(dana):
    user, client = dana
    study = open_utility_study(name="checks", n_items=2, n_sources=1, quota=2, units_per_task=2, owner=user)
    AttentionCheckFactory(study=study)
    work(study, "PID-GOOD")
    failed = work(study, "PID-BAD", submit=False, steps=0)
    for claim in failed.claims.select_related("attention_check", "unit__item").order_by("position"):
        if claim.attention_check_id:
            annotation_submit(assignment=failed, claim=claim, step="attention", answer="yes")
        else:
            annotation_submit(assignment=failed, claim=claim, step="before", answer="no",
                              payload={"flag": True, "flag_note": "no right answer"})
            # Questions are answered in the task's order: this one is finished before the next.
            annotation_submit(assignment=failed, claim=claim, step="after", answer="no")
    now = progress(client, study)
    assert (now["attention_answered"], now["attention_failed"], now["answers_flagged"]) == (2, 1, 2)


def test_pay_is_quoted_only_from_enough_real_timings(dana, clock):
    user, client = dana
    study = open_utility_study(name="pay", n_items=2, n_sources=5, quota=3, units_per_task=1, owner=user)
    assert study.reward == Decimal("2.00") and study.estimated_minutes_per_task == Decimal("6.0")
    first = progress(client, study)["pay"]
    assert (first["basis"], first["figure"], first["timed_tasks"]) == ("estimate", "20.00", 0)
    assert "No task timed yet" in first["text"]

    # Bots: five tasks answered in no time (half a second a step, as their pages timed it). The old
    # page printed "Effective hourly pay $1200.00/h".
    for n in range(5):
        work(study, f"PID-BOT-{n}", shown_for=0.5)
    bots = progress(client, study)["pay"]
    assert bots["timed_tasks"] == 5 and bots["basis"] == "estimate" and bots["figure"] == "20.00"
    assert "faster than a person reads" in bots["text"]
    assert any("automated or careless" in w for w in bots["warnings"])

    # People: ten-minute tasks. 2.00 a task is 12.00 an hour, below the 15.00 floor.
    for n in range(6):
        assignment = work(study, f"PID-HUMAN-{n}", submit=False, shown_for=60)
        clock.advance(minutes=10)
        assignment_submit(assignment=assignment)
    people = progress(client, study)["pay"]
    assert people["timed_tasks"] == 11
    assert people["basis"] == "recorded" and people["figure"] == "12.00"
    assert people["below_floor"] is True
    assert any("below the floor of 15.00/h" in w for w in people["warnings"])


def test_too_few_timed_tasks_keep_the_estimate(dana, clock):
    user, client = dana
    study = open_utility_study(name="few", n_items=2, n_sources=1, quota=2, units_per_task=1, owner=user)
    assignment = work(study, "PID-ONE", submit=False)
    clock.advance(minutes=20)
    assignment_submit(assignment=assignment)
    pay = progress(client, study)["pay"]
    assert (pay["basis"], pay["figure"], pay["timed_tasks"]) == ("estimate", "20.00", 1)
    assert pay["text"].startswith("Only 1 paid or payable task timed (median 20.0 min), too few to quote")


def test_untimed_steps_keep_the_estimate_whatever_the_recorded_median(dana):
    """Six tasks answered with no step timed (a page that sent no display time), each submitted in
    no time: with no question's steps timed the pace cannot be judged, so the recorded median
    (0.0 min, "0/h") is not quoted nor a reward of 0.00 suggested from it; the estimate stands and
    the page says why."""
    user, client = dana
    study = open_utility_study(name="untimed", n_items=2, n_sources=5, quota=3, units_per_task=1, owner=user)
    for n in range(6):
        work(study, f"PID-UNTIMED-{n}")

    pay = progress(client, study)["pay"]

    assert (pay["timed_tasks"], pay["median_minutes"], pay["seconds_per_question"]) == (6, 0.0, None)
    assert (pay["basis"], pay["figure"], pay["below_floor"]) == ("estimate", "20.00", False)
    assert "no question's steps were timed, so the pace cannot be judged" in pay["text"]
    assert "the estimate of 6 min a task gives 20.00/h" in pay["text"]
    assert not any("at least 0.00" in w for w in pay["warnings"])


def test_rejected_work_is_not_timed_for_pay(dana, clock):
    """The audit's case: five workers take 10 minutes a task; five bots take 2 minutes and are
    rejected. The page quoted 60.00/h from "Median of 10 timed tasks: 2.0 min", above the floor; the
    paid workers earn 2.00 for 10 minutes, 12.00/h, below the 15.00 floor."""
    user, client = dana
    study = open_utility_study(name="rejected", n_items=2, n_sources=5, quota=3, units_per_task=1, owner=user,
                               platform=Platform.LINK)
    AttentionCheckFactory(study=study)
    AttentionCheckFactory(study=study)
    for n in range(5):
        assignment = work(study, f"lab-human-{n}", submit=False, shown_for=60, platform=Platform.LINK)
        clock.advance(minutes=10)
        assignment_submit(assignment=assignment)
    for n in range(5):
        bot = work(study, f"lab-bot-{n}", submit=False, shown_for=20, platform=Platform.LINK)
        clock.advance(minutes=2)
        assignment_reject(user=OPERATOR, study=study, assignment=assignment_submit(assignment=bot),
                          feedback="Answered faster than the questions can be read.")

    pay = progress(client, study)["pay"]

    assert (pay["timed_tasks"], pay["median_minutes"]) == (5, 10.0)
    assert (pay["basis"], pay["figure"], pay["below_floor"]) == ("recorded", "12.00", True)
    assert pay["text"].startswith("Median of 5 paid or payable tasks: 10.0 min a task")
    assert any("at least 2.50" in w for w in pay["warnings"])


def test_seconds_a_question_is_the_review_rule_of_the_workers_page(dana, clock):
    """Workers who keep a task open ten minutes but answer each step in a second: the page divided
    the ten minutes by the task's one question (600 s a question, a human pace) and quoted 12.00/h;
    the workers page, and the speeder check, read the questions' step times: 2 s a question, faster
    than a person reads. The pace the pay is judged on is that one figure."""
    user, client = dana
    study = open_utility_study(name="pace", n_items=2, n_sources=5, quota=3, units_per_task=1, owner=user)
    for n in range(5):
        assignment = work(study, f"PID-FAST-{n}", submit=False, shown_for=1)
        clock.advance(minutes=10)
        assignment_submit(assignment=assignment)

    pay = progress(client, study)["pay"]

    assert {record.seconds_per_question for record in study_workers(study=study)} == {2.0}
    assert pay["seconds_per_question"] == 2.0
    assert (pay["basis"], pay["figure"]) == ("estimate", "20.00")
    assert "2.0 s a question" in pay["text"] and "faster than a person reads" in pay["text"]
    html = client.get(f"/admin/studies/study/{study.pk}/progress/").content.decode()
    assert '<span data-k="pay.seconds_per_question">2.0</span> s a question' in html


def test_the_page_renders_the_numbers_and_polls_its_json(dana):
    user, client = dana
    study = open_utility_study(name="page", n_items=2, n_sources=1, quota=1, units_per_task=2, owner=user)
    work(study, "PID-1")
    page = client.get(f"/admin/studies/study/{study.pk}/progress/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-poll-url="/admin/studies/study/{study.pk}/progress.json"' in html
    assert '<span data-k="answers_collected">2</span>' in html
    assert not re.search(r"""<(script|link)[^>]+(src|href)=["']?(https?:)?//""", html)  # nothing from elsewhere


def test_other_researchers_studies_are_not_found_and_rights_are_needed(dana):
    user, client = dana
    mine = open_utility_study(name="mine", owner=user)
    olga, _ = staff_client("olga")
    theirs = open_utility_study(name="theirs", owner=olga)
    for url in ("progress/", "progress.json", "workers/"):
        assert client.get(f"/admin/studies/study/{theirs.pk}/{url}").status_code == 404
        assert client.get(f"/admin/studies/study/{mine.pk}/{url}").status_code == 200
    _, nobody = staff_client("nobody", perms=False)
    mine.shared_with.add(nobody.session["_auth_user_id"])
    assert nobody.get(f"/admin/studies/study/{mine.pk}/progress.json").status_code == 403
    assert Client().get(f"/admin/studies/study/{mine.pk}/progress.json").status_code == 302  # to the login


def test_the_study_list_shows_status_and_completion(dana):
    user, client = dana
    study = open_utility_study(name="listed", n_items=2, n_sources=1, quota=2, units_per_task=2, owner=user)
    work(study, "PID-1")
    other = open_utility_study(name="listed-too", n_items=1, n_sources=1, quota=4, units_per_task=1, owner=user)
    work(other, "PID-2")
    response = client.get("/admin/studies/study/")
    html = response.content.decode()
    assert '<progress value="2" max="4"' in html and "50%" in html
    assert '<progress value="1" max="4"' in html and "25%" in html
    assert "Open" in html


def test_the_study_page_links_its_pages(dana):
    from scoring.services import study_score

    user, client = dana
    study = open_utility_study(name="linked", n_items=2, n_sources=1, quota=1, units_per_task=2, owner=user)
    work(study, "PID-1")
    html = client.get(f"/admin/studies/study/{study.pk}/change/").content.decode()
    for needle in (f"/admin/studies/study/{study.pk}/progress/", f"/admin/studies/study/{study.pk}/workers/",
                   f"/admin/annotations/publication/publish/{study.pk}/",
                   f"/admin/annotations/publication/?study__id__exact={study.pk}",
                   f"/admin/scoring/scorerun/?study__id__exact={study.pk}", "Watch it fill"):
        assert needle in html
    assert "Latest report" not in html
    progress = client.get(f"/admin/studies/study/{study.pk}/progress/").content.decode()
    nav = progress.split('id="study-nav"')[1].split("</ul>")[0]
    assert "<li></li>" not in nav and "Latest report" not in nav  # no empty entry where the report will be
    run = study_score(study=study, similarity=False)
    html = client.get(f"/admin/studies/study/{study.pk}/change/").content.decode()
    assert f"/admin/scoring/scorerun/{run.pk}/report/" in html
