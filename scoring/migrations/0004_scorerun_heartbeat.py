"""ScoreRun: ``updated_at`` (the running worker's heartbeat) and ``attempts`` (starts), for the
stall recovery of ``scoring.services.runs``."""
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scoring', '0003_unitscore_correct_blank_until_scored'),
    ]

    operations = [
        migrations.AddField(
            model_name='scorerun',
            name='updated_at',
            field=models.DateTimeField(auto_now=True, default=django.utils.timezone.now),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='scorerun',
            name='attempts',
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddIndex(
            model_name='scorerun',
            index=models.Index(fields=['status', 'updated_at'], name='scorerun_status_updated'),
        ),
    ]
