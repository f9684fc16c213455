from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('annotations', '0022_platformsubmission_flagged_at'),
    ]

    operations = [
        migrations.AddField(
            model_name='assignment',
            name='ended_by_researcher',
            field=models.BooleanField(default=False),
        ),
    ]
