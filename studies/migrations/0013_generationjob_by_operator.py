"""GenerationJob.by_operator: who a job acts for when it has no researcher.

Before this field a job with no ``created_by`` stored as the operator, whether a command started it
or its researcher's account was deleted later. The two cannot be told apart in the rows written
before, so those keep what they did (``by_operator`` true); a job started from now on is the
operator's only when no researcher started it (``generation.jobs.generation_job_create``)."""
from django.db import migrations, models


def _jobs_without_researcher_stay_operators(apps, schema_editor):
    apps.get_model("studies", "GenerationJob").objects.filter(created_by__isnull=True).update(by_operator=True)


class Migration(migrations.Migration):

    dependencies = [
        ("studies", "0012_early_stopping"),
    ]

    operations = [
        migrations.AddField(
            model_name="generationjob",
            name="by_operator",
            field=models.BooleanField(default=False, editable=False),
        ),
        migrations.RunPython(_jobs_without_researcher_stay_operators, migrations.RunPython.noop),
    ]
