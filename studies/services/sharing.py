"""Sharing a study with another researcher at a level (view, change or pay: ``StudyShare``).

Only the study's owner (or a superuser) shares it or changes a share: someone a study is shared
with, at any level, cannot share it further or raise their own level. What each level grants is
read by the one access selector, ``studies.selectors.studies_for_user``."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from studies.models import Study, StudyShare
from studies.services.studies import StudyError, study_owner_or_superuser, study_recipient_active

LEVELS = [level for level, _ in StudyShare.Level.choices]


def share_recipient_get(username: str):
    """The researcher a study may be shared with, by username: an active user; None for any other
    name (unknown, or an inactive account: one answer, whoever it is). The one reading of a typed
    username for the study page's shares (``ShareForm``) and the API's design (``shared_with``),
    neither of which offers a list of every account to pick from."""
    if not isinstance(username, str) or not username:
        return None
    return get_user_model().objects.filter(is_active=True, username=username).first()


def _check_may_share(*, study: Study, user) -> None:
    if not study_owner_or_superuser(study=study, user=user):
        raise StudyError(f"study {study.pk}: not found or not yours to share (only its owner shares a study).")


@transaction.atomic
def study_share(*, study: Study, user, with_user: AbstractBaseUser, level: str = StudyShare.Level.VIEW) -> StudyShare:
    """Share ``study`` with ``with_user`` at ``level`` (or change the level of their share), for
    ``user``, who must own the study (or be a superuser)."""
    _check_may_share(study=study, user=user)
    if level not in LEVELS:
        raise StudyError(f"level must be one of {', '.join(LEVELS)}; not {level!r}")
    if not study_recipient_active(with_user):
        raise StudyError(f"user {with_user.pk}: not found or not active.")
    if with_user.pk == study.owner_id:
        raise StudyError(f"{with_user} owns study {study.name!r}: the owner needs no share.")
    share, _ = StudyShare.objects.update_or_create(study=study, user=with_user, defaults={"level": level})
    return share


@transaction.atomic
def study_unshare(*, study: Study, user, with_user: AbstractBaseUser) -> None:
    """End ``with_user``'s share of ``study``, for ``user``, who must own it (or be a superuser)."""
    _check_may_share(study=study, user=user)
    StudyShare.objects.filter(study=study, user=with_user).delete()
