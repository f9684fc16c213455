import hashlib
import secrets

from django.conf import settings
from django.db import migrations, models

import annotations.models.platforms


def make_installation_id(apps, schema_editor):
    """Make the one installation row. An installation that already talked to a platform keeps
    the tag its tokens were built from until now (derived from SECRET_KEY), so a publish or a
    bonus asked for again after this migration still finds its earlier token; a new one gets a
    random id. From here on the id is stored, and SECRET_KEY no longer enters any token."""
    Installation = apps.get_model("annotations", "Installation")
    PlatformCall = apps.get_model("annotations", "PlatformCall")
    if Installation.objects.exists():
        return
    if PlatformCall.objects.exists():
        installation_id = hashlib.sha256(settings.SECRET_KEY.encode()).hexdigest()[:6]
    else:
        installation_id = secrets.token_hex(4)
    Installation.objects.create(installation_id=installation_id)


class Migration(migrations.Migration):

    dependencies = [
        ('annotations', '0005_platform_and_claim_names'),
    ]

    operations = [
        migrations.CreateModel(
            name='Installation',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('installation_id', models.CharField(default=annotations.models.platforms.new_installation_id,
                                                     max_length=16, unique=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.RunPython(make_installation_id, migrations.RunPython.noop),
    ]
