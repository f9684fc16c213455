"""API tokens: creation (the key is returned once, only its digest is stored) and lookup."""
from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

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


def api_tokens_end_for_password_change(*, user: AbstractBaseUser) -> int:
    """End every token of ``user`` made before now: their password changed (set, reset or made
    unusable), which ends their sessions too. Call with the account being saved with its new
    password (``studies.signals`` does, inside the save, so a save rolled back ends nothing).
    Returns how many tokens it ended; tokens made afterwards work."""
    return ApiToken.objects.filter(user_id=user.pk, ended_by_password_change=False).update(
        ended_by_password_change=True)


def api_token_refusal(*, token: ApiToken, now: datetime | None = None) -> str | None:
    """Why ``token`` no longer authenticates, in a few words (its status in the token admin), or None
    while it does: revoked, expired, its user inactive, or ended by a password change (its user's
    password was changed, reset or made unusable since it was made, which ends their sessions too;
    Django's rehash of the same password on login is no change). The one rule
    ``api_token_get_valid`` applies."""
    if token.revoked:
        return "revoked"
    if token.expires_at is not None and token.expires_at <= (now or timezone.now()):
        return "expired"
    if not token.user.is_active:
        return "user inactive"
    if token.ended_by_password_change:
        return PASSWORD_CHANGED
    return None


def api_token_get_valid(*, key: str) -> ApiToken | None:
    """The active token with this key, or None (unknown, or refused by ``api_token_refusal``:
    revoked, expired, inactive user, or a password changed since it was made)."""
    token = ApiToken.objects.select_related("user").filter(key_digest=_digest(key), revoked=False).first()
    now = timezone.now()
    if token is None or api_token_refusal(token=token, now=now) is not None:
        return None
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
