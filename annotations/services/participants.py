"""Participants: who a worker is on their platform, and the link-based ways in."""
from __future__ import annotations

import secrets

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from annotations.models import Participant
from annotations.services.errors import StudyNotOpen
from studies.models import Platform


def participant_get_or_create(*, platform: str, external_id: str) -> Participant:
    """The participant with this platform id, created on first sight (safe under races)."""
    participant = Participant.objects.filter(platform=platform, external_id=external_id).first()
    if participant is not None:
        return participant
    try:
        with transaction.atomic():
            return Participant.objects.create(platform=platform, external_id=external_id)
    except IntegrityError:
        return Participant.objects.get(platform=platform, external_id=external_id)


def participant_new_anonymous() -> Participant:
    """A participant for a plain link: a random id, kept by the worker's browser."""
    return Participant.objects.create(platform=Platform.LINK, external_id=f"anon-{secrets.token_hex(8)}")


@transaction.atomic
def participant_link_redeem(*, link) -> Participant:
    """The participant of a single-person link (``ParticipantLink``), created at first use."""
    from annotations.models.platforms import ParticipantLink

    locked = ParticipantLink.objects.select_for_update().get(pk=link.pk)
    if locked.revoked:
        raise StudyNotOpen("This link has been withdrawn by the researcher.")
    if locked.participant_id:
        return locked.participant
    participant = participant_get_or_create(platform=Platform.LINK, external_id=f"plink-{locked.pk}")
    locked.participant = participant
    locked.redeemed_at = timezone.now()
    locked.save(update_fields=["participant", "redeemed_at"])
    return participant


@transaction.atomic
def open_link_join(*, link) -> Participant:
    """A new participant through a shared link (``OpenLink``), counted against its capacity."""
    from annotations.models.platforms import OpenLink

    updated = OpenLink.objects.filter(pk=link.pk, active=True).filter(
        Q(max_participants__isnull=True) | Q(n_participants__lt=F("max_participants"))
    ).update(n_participants=F("n_participants") + 1)
    if not updated:
        raise StudyNotOpen("This link is full or closed. Thank you for your interest.")
    return participant_new_anonymous()
