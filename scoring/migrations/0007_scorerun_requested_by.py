"""ScoreRun.requested_by / by_operator: who asked for a run, checked again when a worker starts it.

Runs made before this was recorded were checked when they were queued and name nobody: they are
marked the operator's, so a pending one left from before still runs."""
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def earlier_runs_are_the_operators(apps, schema_editor):
    apps.get_model("scoring", "ScoreRun").objects.update(by_operator=True)


class Migration(migrations.Migration):

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("scoring", "0006_unitscore_score_run"),
    ]

    operations = [
        migrations.AddField(
            model_name="scorerun",
            name="by_operator",
            field=models.BooleanField(default=False, editable=False),
        ),
        migrations.AddField(
            model_name="scorerun",
            name="requested_by",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                    related_name="+", to=settings.AUTH_USER_MODEL),
        ),
        migrations.RunPython(earlier_runs_are_the_operators, migrations.RunPython.noop),
    ]
