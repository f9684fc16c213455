# One word for the crowd platform a study runs on: "platform" (was "provider").
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("studies", "0003_lm_jobs_generators")]

    operations = [
        migrations.RenameField("study", "provider", "platform"),
    ]
