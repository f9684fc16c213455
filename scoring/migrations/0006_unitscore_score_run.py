"""UnitScore.score_run: the run that wrote a row's scores (None: not scored), and n_annotators
nullable (an outcomes file that does not say how many workers answered).

Rows scored before runs were recorded on them get their study's latest finished run, when that run
finished after the row last changed (the run that wrote it, as the exports assumed); any other
scored row (changed since, e.g. by an outcomes re-import) keeps None: its run is not known."""
import django.db.models.deletion
from django.db import migrations, models


def name_the_runs(apps, schema_editor):
    ScoreRun = apps.get_model("scoring", "ScoreRun")
    UnitScore = apps.get_model("scoring", "UnitScore")
    studies = UnitScore.objects.filter(utility__isnull=False).values_list("study_id", flat=True).distinct()
    for study_id in list(studies):
        run = (ScoreRun.objects.filter(study_id=study_id, status="done", finished_at__isnull=False)
               .order_by("-finished_at", "-pk").first())
        if run is not None:
            UnitScore.objects.filter(study_id=study_id, utility__isnull=False,
                                     updated_at__lte=run.finished_at).update(score_run=run)


class Migration(migrations.Migration):

    dependencies = [
        ('scoring', '0005_bundled_utility'),
    ]

    operations = [
        migrations.AddField(
            model_name='unitscore',
            name='score_run',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='scoring.scorerun'),
        ),
        migrations.AlterField(
            model_name='unitscore',
            name='n_annotators',
            field=models.PositiveIntegerField(blank=True, default=0, null=True),
        ),
        migrations.RunPython(name_the_runs, migrations.RunPython.noop),
    ]
