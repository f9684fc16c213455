"""A study's task durations are fixed when it opens (``opening.study_open`` records them from the
deadline rule as it reads then: ``deadlines.task_minutes_at_opening``), so a redeploy that changes
RL_ASSIGNMENT_MINUTES or RL_FIRST_ANSWER_MINUTES no longer gives a live study's new tasks other
deadlines than its platform was sent and its workers were told: raised, the app let a worker go on
past the platform's time limit (timed out there, unpaid); lowered, workers lost tasks earlier than
promised. A draft follows the settings (its preview and estimates); no one sets the durations, and
once fixed they do not change; the migration that added them filled the studies already open."""
from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import override_settings
from django.urls import reverse

from annotations.models import Assignment
from annotations.services.answers import annotation_submit
from annotations.services.assignment import assignment_start
from annotations.services.deadlines import assignment_duration, first_answer_window
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from scoring.services.score import expiry_rule
from studies.models import Study
from studies.services.studies import StudyError, study_fixed_fields, study_update
from tests.annotations.factories import ParticipantFactory, make_study
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_setup import form_data

pytestmark = pytest.mark.django_db
MINUTE, SECOND = timedelta(minutes=1), timedelta(seconds=1)
AT_OPENING = {"RL_ASSIGNMENT_MINUTES": 40, "RL_FIRST_ANSWER_MINUTES": 8}
# After a redeploy: raised, lowered, unset (the rule for a 6-minute study: 30 and 10 minutes).
REDEPLOYS = {
    "raised": {"RL_ASSIGNMENT_MINUTES": 90, "RL_FIRST_ANSWER_MINUTES": 20},
    "lowered": {"RL_ASSIGNMENT_MINUTES": 15, "RL_FIRST_ANSWER_MINUTES": 3},
    "unset": {"RL_ASSIGNMENT_MINUTES": None, "RL_FIRST_ANSWER_MINUTES": None},
}


def _opened(**fields) -> Study:
    """A 6-minute study opened by ``study_open`` (``make_study``) while the settings read 40 and 8."""
    with override_settings(**AT_OPENING):
        return make_study(n_items=2, n_sources=1, quota=2, units_per_task=2,
                          estimated_minutes_per_task=Decimal("6.0"), **fields)


@pytest.mark.parametrize("redeploy", REDEPLOYS)
def test_a_task_started_after_the_settings_changed_keeps_the_deadlines_the_study_opened_with(redeploy):
    study = _opened()
    row = Study.objects.get(pk=study.pk)
    assert (row.assignment_minutes, row.first_answer_minutes) == (40, 8)
    assert (study.assignment_minutes, study.first_answer_minutes) == (40, 8)  # the caller's instance too

    with override_settings(**REDEPLOYS[redeploy]):
        study = Study.objects.get(pk=study.pk)  # as a worker's request reads it
        assert (assignment_duration(study), first_answer_window(study)) == (40 * MINUTE, 8 * MINUTE)
        task = assignment_start(study=study, participant=ParticipantFactory(), consented=True)
        assert abs(task.expires_at - (task.created_at + 8 * MINUTE)) < SECOND  # "now" is read once more
        claim = task.claims.filter(unit__isnull=False).select_related("unit__item").first()
        annotation_submit(assignment=task, claim=claim, step="before", answer="yes")
        task.refresh_from_db()
        assert task.status == Assignment.Status.ACTIVE
        assert task.expires_at == task.created_at + 40 * MINUTE  # the first answer gives it the full time


@pytest.mark.parametrize("redeploy", ["raised", "lowered"])
def test_consent_on_the_task_page_after_the_settings_changed_gets_the_window_the_study_opened_with(client,
                                                                                                  redeploy):
    study = _opened()
    with override_settings(**REDEPLOYS[redeploy]):
        task = assignment_start(study=Study.objects.get(pk=study.pk), participant=ParticipantFactory())
        page = f"/w/a/{task.token}/"
        assert client.post(page + "consent", {"consent": "yes"}).status_code == 302
        task.refresh_from_db()
        assert task.consented_at is not None
        assert task.expires_at == min(task.consented_at + 8 * MINUTE, task.created_at + 40 * MINUTE)


def test_a_draft_follows_the_settings_until_it_opens():
    study = make_study(n_items=2, n_sources=1, quota=2, units_per_task=2, status=Study.Status.DRAFT,
                       estimated_minutes_per_task=Decimal("6.0"))
    assert (study.assignment_minutes, study.first_answer_minutes) == (None, None)
    for name, redeploy in REDEPLOYS.items():
        with override_settings(**redeploy):
            minutes = redeploy["RL_ASSIGNMENT_MINUTES"] or 30, redeploy["RL_FIRST_ANSWER_MINUTES"] or 10
            assert (assignment_duration(study), first_answer_window(study)) == (
                minutes[0] * MINUTE, minutes[1] * MINUTE), name
    with override_settings(**REDEPLOYS["lowered"]):
        study_open(study=study, user=OPERATOR)  # opened now: what the settings read now is fixed
    with override_settings(**REDEPLOYS["raised"]):
        assert (assignment_duration(study), first_answer_window(study)) == (15 * MINUTE, 3 * MINUTE)
        study = Study.objects.get(pk=study.pk)
        assert (study.assignment_minutes, study.first_answer_minutes) == (15, 3)


def test_a_study_opened_with_the_settings_unset_fixes_the_rule_for_its_estimate():
    with override_settings(**REDEPLOYS["unset"]):
        study = make_study(n_items=2, n_sources=1, estimated_minutes_per_task=Decimal("12.5"))
    assert (study.assignment_minutes, study.first_answer_minutes) == (50, 12.5)
    with override_settings(**AT_OPENING):
        assert (assignment_duration(study), first_answer_window(study)) == (50 * MINUTE, 12.5 * MINUTE)


@pytest.mark.parametrize("field", ["assignment_minutes", "first_answer_minutes"])
def test_no_one_changes_the_fixed_durations(field):
    study = _opened()
    assert {"assignment_minutes", "first_answer_minutes"} <= set(study_fixed_fields(study=study))
    with pytest.raises(StudyError) as refused:
        study_update(study=Study.objects.get(pk=study.pk), user=None, **{field: 90})
    assert set(refused.value.problems) == {field}
    fixed = {"assignment_minutes": 40, "first_answer_minutes": 8}[field]
    assert refused.value.problems[field].startswith("The study is no longer a draft (open): its minutes ")
    assert f"cannot change (fixed at {fixed} when it opened" in refused.value.problems[field]
    study_update(study=Study.objects.get(pk=study.pk), user=None, **{field: fixed})  # the same: no change
    row = Study.objects.get(pk=study.pk)
    assert (row.assignment_minutes, row.first_answer_minutes) == (40, 8)


def test_a_draft_does_not_take_durations_either_opening_sets_them():
    study = make_study(n_items=2, n_sources=1, status=Study.Status.DRAFT)
    with pytest.raises(StudyError) as refused:
        study_update(study=study, user=None, assignment_minutes=600, first_answer_minutes=600)
    assert set(refused.value.problems) == {"assignment_minutes", "first_answer_minutes"}
    assert "is set when the study opens, from the deadline rule" in refused.value.problems["assignment_minutes"]
    assert Study.objects.get(pk=study.pk).assignment_minutes is None


def test_the_study_page_shows_the_fixed_durations_and_takes_none_posted():
    olga, client = staff_client("olga")
    study = _opened(owner=olga, name="olgas-deadlines")
    url = reverse("admin:studies_study_change", args=[study.pk])
    page = client.get(url)
    html = page.content.decode()
    assert "Minutes a worker has for a task" in html and "Minutes a new task waits for its first answer" in html
    assert "40.0" in html and "8.0" in html
    assert "assignment_minutes" not in page.context["adminform"].form.fields
    assert 'name="assignment_minutes"' not in html
    data = {**form_data(page), "assignment_minutes": "90", "first_answer_minutes": "20", "instructions": "Read."}
    assert client.post(url, data).status_code == 302  # the rest saves; the durations are not taken
    row = Study.objects.get(pk=study.pk)
    assert (row.assignment_minutes, row.first_answer_minutes, row.instructions) == (40, 8, "Read.")


def test_the_results_name_the_durations_the_study_opened_with():
    study = _opened()
    with override_settings(**REDEPLOYS["raised"]):
        said = expiry_rule(Study.objects.get(pk=study.pk))
    assert "fixed when it opened" in said and "40 and 8 minutes" in said
    assert "90" not in said and "as the settings stand now" not in said


BEFORE = [("studies", "0015_study_pay_currency_help")]
AFTER = [("studies", "0016_study_task_minutes")]


@pytest.mark.django_db(transaction=True)
def test_the_migration_fixes_the_durations_of_studies_already_opened(migrate_to, settings):
    old = migrate_to(BEFORE)
    OldStudy, Dataset = old.get_model("studies", "Study"), old.get_model("studies", "Dataset")
    dataset = Dataset.objects.create(name="migrated-deadlines")

    def study(name, status, minutes, **fields):
        return OldStudy.objects.create(name=name, dataset=dataset, status=status, consent_text="I agree.",
                                       estimated_minutes_per_task=Decimal(minutes), **fields).pk

    opened, closed = study("open-6", "open", "6.0"), study("closed-20", "closed", "20.0")
    draft, imported = study("draft-6", "draft", "6.0"), study("imported", "closed", "6.0", is_imported_outcome=True)
    settings.RL_ASSIGNMENT_MINUTES, settings.RL_FIRST_ANSWER_MINUTES = None, 12  # this deploy's settings

    migrate_to(AFTER)
    migrate_to(MigrationExecutor(connection).loader.graph.leaf_nodes())  # the models below are today's
    rows = {pk: (s.assignment_minutes, s.first_answer_minutes) for pk, s in Study.objects.in_bulk().items()}
    assert rows[opened] == (30, 12) and rows[closed] == (80, 12)  # the rule for 6 and 20 minutes, and 12
    assert rows[draft] == rows[imported] == (None, None)
    settings.RL_ASSIGNMENT_MINUTES, settings.RL_FIRST_ANSWER_MINUTES = 90, 3  # a later redeploy
    row = Study.objects.get(pk=opened)
    assert (assignment_duration(row), first_answer_window(row)) == (30 * MINUTE, 12 * MINUTE)
