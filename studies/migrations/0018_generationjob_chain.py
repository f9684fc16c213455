"""GenerationJob.chain: the token of a job's one live chain of messages. Each message that queues
the job draws it anew and carries it; a batch whose message carries another token starts nothing
and queues no next batch (``studies.services.generation.jobs``). Existing jobs start at 0; a
message queued before this migration carries no token and still runs, as the job's chain."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('studies', '0017_apitoken_ended_by_password_change'),
    ]

    operations = [
        migrations.AddField(
            model_name='generationjob',
            name='chain',
            field=models.PositiveIntegerField(default=0, editable=False, help_text="Token of the job's live chain of messages: a message carrying another one does nothing."),
        ),
    ]
