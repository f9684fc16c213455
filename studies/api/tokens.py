"""API tokens: creation (the key is returned once, only its digest is stored) and lookup."""
from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from studies.models import ApiToken

KEY_PREFIX = "rl_"
# last_used_at is refreshed at most this often, so that reads do not each cost a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


TOKEN_ADD_PERMISSION = "studies.add_apitoken"


@transaction.atomic
def api_token_create(
    *, user: AbstractBaseUser, name: str, by: AbstractBaseUser | None, read_only: bool = True,
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Create a token for ``user``, acting as ``by``; return it and its key. The key is not stored:
    show it now. ``by`` is a superuser (a token for anyone), or ``user`` themself holding
    ``studies.add_apitoken`` (a token for no one else); None is the operator (a script or a
    management command). A token acts with all of its user's rights, so this is checked here, not
    only by the admin page that usually calls it."""
    allowed = by is None or (by.is_active and (
        by.is_superuser or (by.pk == user.pk and by.has_perm(TOKEN_ADD_PERMISSION))))
    if not allowed:
        raise ValidationError({"user": f"{by} may not create an API token for {user}: only a superuser creates "
                                       "tokens for others, and a user with the permission to add tokens their own."})
    if not user.is_active:
        raise ValidationError({"user": f"User {user} is inactive: activate the account before giving it a token."})
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        user=user,
        name=name.strip(),
        prefix=key[:10],
        key_digest=_digest(key),
        read_only=read_only,
        expires_at=expires_at,
        password_hash=user.get_session_auth_hash(),  # a password change ends it (api_token_refusal)
    )
    token.full_clean()
    token.save()
    return token, key


TOKEN_CHANGE_PERMISSION = "studies.change_apitoken"
UPDATABLE = ("name", "read_only", "expires_at", "revoked")


@transaction.atomic
def api_token_update(*, token: ApiToken, user: AbstractBaseUser, **changes) -> ApiToken:
    """Change a token for ``user`` (a superuser, or the token's owner holding
    ``studies.change_apitoken``): its name, or narrow it (``ApiToken.clean``: revoke it, make it
    read-only, bring its expiry forward). Widening it is refused with the field named."""
    unknown = sorted(set(changes) - set(UPDATABLE))
    if unknown:
        raise ValueError(f"api_token_update changes only {', '.join(UPDATABLE)}; not {', '.join(unknown)}")
    locked = ApiToken.objects.select_for_update().filter(pk=token.pk).first()
    allowed = user is not None and user.is_active and (
        user.is_superuser or (locked is not None and locked.user_id == user.pk and user.has_perm(TOKEN_CHANGE_PERMISSION)))
    if locked is None or not allowed:
        raise ValidationError(f"Token {token.pk}: not found or not yours.")
    for field, value in changes.items():
        setattr(locked, field, value.strip() if field == "name" else value)
    locked.full_clean()
    locked.save(update_fields=[*changes])
    return locked


PASSWORD_CHANGED = "ended by a password change"


def _password_unchanged(token: ApiToken) -> bool:
    """Whether the token's user has the password they had when it was made: the hash it keeps
    (``password_hash``) is their session auth hash now, or one under a key of
    ``SECRET_KEY_FALLBACKS``, read as Django reads a session's (``django.contrib.auth.get_user``)."""
    user = token.user
    if constant_time_compare(token.password_hash, user.get_session_auth_hash()):
        return True
    return any(constant_time_compare(token.password_hash, fallback)
               for fallback in user.get_session_auth_fallback_hash())


def api_token_refusal(*, token: ApiToken, now: datetime | None = None) -> str | None:
    """Why ``token`` no longer authenticates, in a few words (its status in the token admin), or None
    while it does: revoked, expired, its user inactive, or ended by a password change (its user's
    password changed or was reset since it was made, which ends their sessions too). The one rule
    ``api_token_get_valid`` applies."""
    if token.revoked:
        return "revoked"
    if token.expires_at is not None and token.expires_at <= (now or timezone.now()):
        return "expired"
    if not token.user.is_active:
        return "user inactive"
    if not _password_unchanged(token):
        return PASSWORD_CHANGED
    return None


def api_token_get_valid(*, key: str) -> ApiToken | None:
    """The active token with this key, or None (unknown, or refused by ``api_token_refusal``:
    revoked, expired, inactive user, or a password changed since it was made)."""
    token = ApiToken.objects.select_related("user").filter(key_digest=_digest(key), revoked=False).first()
    now = timezone.now()
    if token is None or api_token_refusal(token=token, now=now) is not None:
        return None
    current = token.user.get_session_auth_hash()
    if token.password_hash != current:  # matched under a fallback key: keep the current key's hash, as a session does
        ApiToken.objects.filter(pk=token.pk, password_hash=token.password_hash).update(password_hash=current)
        token.password_hash = current
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
