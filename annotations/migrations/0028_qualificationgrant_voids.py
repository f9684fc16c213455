from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('annotations', '0027_open_link_joined'),
    ]

    operations = [
        migrations.AddField(
            model_name='qualificationgrant',
            name='voids',
            field=models.JSONField(blank=True, default=list, help_text="Failed attempts set aside because the test was taken again from a browser whose study cookie did not name the task they were taken in (oldest first)."),
        ),
    ]
