"""Study.assignment_minutes and Study.first_answer_minutes: a study's task durations, fixed when it
opens (``annotations.services.opening.study_open``) from the deadline rule as it reads then, and read
from then on by its tasks, its publishes and its results (``annotations.services.deadlines``), so a
redeploy that changes RL_ASSIGNMENT_MINUTES or RL_FIRST_ANSWER_MINUTES no longer gives a live
study's tasks other deadlines than its platform was sent and its workers were told.

Studies no longer drafts when this runs (open, or closed with work that may still be submitted)
are filled here from the rule as it reads at migration time: the settings of the deploy that runs
it, which are the ones their tasks followed until now. Imported outcomes (collected elsewhere, no
task here) and drafts stay empty. The rule is copied below as it reads in this release, not
imported: a migration keeps the rule of its time. Reversing drops the columns."""
from django.conf import settings
from django.db import migrations, models


def _assignment_minutes(study) -> float:
    # deadlines.assignment_minutes_rule as of this migration.
    minutes = settings.RL_ASSIGNMENT_MINUTES
    if not minutes:
        minutes = max(30.0, 4 * float(study.estimated_minutes_per_task))
    return float(minutes)


def _first_answer_minutes(study) -> float:
    # deadlines.first_answer_minutes_rule as of this migration.
    minutes = settings.RL_FIRST_ANSWER_MINUTES
    if not minutes:
        minutes = max(10.0, float(study.estimated_minutes_per_task))
    return min(float(minutes), _assignment_minutes(study))


def fill_opened_studies(apps, schema_editor):
    Study = apps.get_model("studies", "Study")
    opened = Study.objects.using(schema_editor.connection.alias).filter(
        status__in=["open", "closed"], is_imported_outcome=False, assignment_minutes__isnull=True)
    for study in opened.only("pk", "estimated_minutes_per_task").iterator():
        Study.objects.using(schema_editor.connection.alias).filter(pk=study.pk).update(
            assignment_minutes=_assignment_minutes(study), first_answer_minutes=_first_answer_minutes(study))


class Migration(migrations.Migration):

    dependencies = [
        ("studies", "0015_study_pay_currency_help"),
    ]

    operations = [
        migrations.AddField(
            model_name="study",
            name="assignment_minutes",
            field=models.FloatField(
                blank=True, editable=False, null=True, verbose_name="minutes a worker has for a task",
                help_text="Fixed when the study opens, from RL_ASSIGNMENT_MINUTES (unset: four times the estimated "
                          "minutes, at least 30) as it read then: what its workers were promised and what its "
                          "platform's time limit is set from. Empty while a draft."),
        ),
        migrations.AddField(
            model_name="study",
            name="first_answer_minutes",
            field=models.FloatField(
                blank=True, editable=False, null=True, verbose_name="minutes a new task waits for its first answer",
                help_text="Fixed when the study opens, from RL_FIRST_ANSWER_MINUTES (unset: the estimated minutes, "
                          "at least 10; never more than the task's minutes) as it read then: a task with no answer by "
                          "then gives its units back. Empty while a draft."),
        ),
        migrations.RunPython(fill_opened_studies, migrations.RunPython.noop),
    ]
