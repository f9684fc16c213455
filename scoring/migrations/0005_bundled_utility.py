"""BundledUtility: the borrowed utility a study imported from a bundle scores with. Studies
imported from a bundle before bundles carried that table get a row without one, so that their
scoring says Figure 4's by_utility cannot be reproduced instead of borrowing from this
installation's studies (which need not be the ones the bundle was scored with)."""
import django.db.models.deletion
from django.db import migrations, models

# As scoring.services.bundle.importing says it of a bundle without the table (frozen here).
NO_TABLE = ("the study bundle it was imported from has no borrowed utility table (data/borrowed_utility.csv: "
            "bundles made before they carried one), so the utility of its original rationales, which came from "
            "another study where the bundle was made, is not known here")


def mark_earlier_copies(apps, schema_editor):
    ImportRecord = apps.get_model("studies", "ImportRecord")
    Study = apps.get_model("studies", "Study")
    BundledUtility = apps.get_model("scoring", "BundledUtility")
    ids = {r.get("study") for r in ImportRecord.objects.filter(kind="bundle").values_list("summary", flat=True)
           if isinstance(r, dict)}
    copies = Study.objects.filter(pk__in=[i for i in ids if isinstance(i, int)]).exclude(kind="utility")
    BundledUtility.objects.bulk_create([BundledUtility(study_id=pk, rows=None, reason=NO_TABLE)
                                        for pk in copies.values_list("pk", flat=True)], ignore_conflicts=True)


class Migration(migrations.Migration):

    dependencies = [
        ('scoring', '0004_scorerun_heartbeat'),
        ('studies', '0013_generationjob_by_operator'),
    ]

    operations = [
        migrations.CreateModel(
            name='BundledUtility',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('rows', models.JSONField(blank=True, null=True)),
                ('provenance', models.JSONField(blank=True, default=dict)),
                ('reason', models.TextField(blank=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('study', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='bundled_utility', to='studies.study')),
            ],
        ),
        migrations.RunPython(mark_earlier_copies, migrations.RunPython.noop),
    ]
