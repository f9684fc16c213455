"""Production settings: refuse to start with the development secret key, without a pseudonym salt
of its own, or with DEBUG on."""
import os
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import CSRF_TRUSTED_ORIGINS, DEBUG, DEFAULT_SECRET_KEY, RL_PUBLIC_URL, SECRET_KEY, env_bool

if SECRET_KEY == DEFAULT_SECRET_KEY or len(SECRET_KEY) < 32:
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY must be set to a random value of at least 32 characters in production."
    )
# The salt keys every withdrawal record, block and exported pseudonym (lab/pseudonyms.py): it must
# outlive the secret key, which the README has operators generate per host and rotate. Falling back
# to the secret key (as base.py does in development) would forget every withdrawal on a restore to
# a new host or a key rotation, so production reads it from the environment or does not start.
RL_PSEUDONYM_SALT = os.environ.get("RL_PSEUDONYM_SALT", "")
# Any value an operator has set is kept, however short: changing it would lose the data it keys.
if not RL_PSEUDONYM_SALT.strip():
    raise ImproperlyConfigured(
        "RL_PSEUDONYM_SALT must be set in production: it keys the participants' withdrawals, blocks "
        "and pseudonyms, and unlike DJANGO_SECRET_KEY it must never change. An existing deployment "
        "keeps its withdrawals and pseudonyms by setting it to the value DJANGO_SECRET_KEY has had so far "
        "(the salt it has been using); a new one sets a random value (at least 32 characters) and keeps "
        "it with the database's backups."
    )
if DEBUG:
    raise ImproperlyConfigured("DJANGO_DEBUG must be off in production.")

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The origins a form may be posted from besides the request's own host: DJANGO_CSRF_TRUSTED_ORIGINS,
# or when it is unset or empty the origin of RL_PUBLIC_URL (the address browsers are sent to), so a
# proxy that rewrites the Host or terminates TLS in front of this one does not refuse every POST.
_public = urlsplit(RL_PUBLIC_URL)
CSRF_TRUSTED_ORIGINS = CSRF_TRUSTED_ORIGINS or ([f"{_public.scheme}://{_public.netloc}"] if _public.netloc else [])
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", True)
SECURE_CONTENT_TYPE_NOSNIFF = True
# HTTPS is the reverse proxy's job by default (it terminates TLS and redirects plain HTTP); set
# DJANGO_SSL_REDIRECT=1 to have Django redirect too (the health check stays on plain HTTP), and
# DJANGO_HSTS_SECONDS once the site is served only over HTTPS: browsers then refuse plain HTTP for
# that long, which cannot be taken back early. Until they are set, `manage.py check --deploy`
# warns about them (security.W008, W004; with HSTS on, W005 and W021 for its subdomain and preload
# options), as the README's "Deployment checks" explains.
SECURE_SSL_REDIRECT = env_bool("DJANGO_SSL_REDIRECT", False)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", "0"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", False)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
