from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('annotations', '0021_platformsubmission_not_on_platform'),
    ]

    operations = [
        migrations.AddField(
            model_name='platformsubmission',
            name='flagged_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
