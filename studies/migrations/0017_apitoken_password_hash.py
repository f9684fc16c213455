"""ApiToken.password_hash: the user's session auth hash when the token was made, so that a password
change or reset ends the token as it ends the user's sessions (``studies.api.tokens``).

Tokens made before this are filled with their user's hash as it reads now, so they keep working
until the next password change. The hash is computed as Django's
``AbstractBaseUser._get_session_auth_hash`` computes it (the historical user model has no such
method), copied here rather than imported: a migration keeps the rule of its time. It uses the
current ``SECRET_KEY``, as Django does for a new session hash. Reversing drops the column."""
from django.conf import settings
from django.db import migrations, models
from django.utils.crypto import salted_hmac

SESSION_AUTH_HASH_SALT = "django.contrib.auth.models.AbstractBaseUser.get_session_auth_hash"


def _session_auth_hash(password: str) -> str:
    # django.contrib.auth.base_user.AbstractBaseUser._get_session_auth_hash (Django 5.2), secret=None.
    return salted_hmac(SESSION_AUTH_HASH_SALT, password, algorithm="sha256").hexdigest()


def fill_password_hash(apps, schema_editor):
    ApiToken = apps.get_model("studies", "ApiToken")
    for token in ApiToken.objects.select_related("user").filter(password_hash="").iterator():
        ApiToken.objects.filter(pk=token.pk).update(password_hash=_session_auth_hash(token.user.password))


class Migration(migrations.Migration):

    dependencies = [
        ('studies', '0016_study_task_minutes'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='apitoken',
            name='password_hash',
            field=models.CharField(default='', editable=False, max_length=128),
        ),
        migrations.RunPython(fill_password_hash, migrations.RunPython.noop),
    ]
