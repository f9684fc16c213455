"""ApiToken.ended_by_password_change: set when the token's user changes their password (or has it
reset or made unusable) after the token was made, which ends the token as it ends the user's
sessions (``studies.signals``, ``studies.api.tokens.api_token_refusal``). Existing tokens start
unmarked: they keep working until their user's next password change."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('studies', '0016_study_task_minutes'),
    ]

    operations = [
        migrations.AddField(
            model_name='apitoken',
            name='ended_by_password_change',
            field=models.BooleanField(default=False, editable=False),
        ),
    ]
