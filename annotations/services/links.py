"""Plain participant links: single-person links and open links. No money moves.

The questionnaire's link views call ``participant_link_redeem(token=..., visitor_id=...)``.
"""
from __future__ import annotations

import secrets

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from annotations.models import OpenLink, Participant, ParticipantLink, Publication
from annotations.services.payments import PlatformServiceError
from studies.models import Platform, Study

# URL shapes of the questionnaire's link views (annotations.platforms): /w/l/<token>/ for a
# single-person link, /w/o/<token>/ for an open link.
SINGLE_LINK_PATH = "/w/l/{token}/"
OPEN_LINK_PATH = "/w/o/{token}/"
MAX_LINKS_PER_CALL = 10_000


class LinkInvalid(PlatformServiceError):
    status = 404


class LinkClosed(PlatformServiceError):
    status = 410


def link_public_url(link: ParticipantLink | OpenLink) -> str:
    is_open = isinstance(link, OpenLink)
    try:
        path = reverse("annotations:open_link_entry" if is_open else "annotations:link_entry", args=[link.token])
    except NoReverseMatch:  # the worker URLs are not mounted (e.g. a trimmed URLconf)
        path = (OPEN_LINK_PATH if is_open else SINGLE_LINK_PATH).format(token=link.token)
    return settings.RL_PUBLIC_URL + path


def links_generate(*, study: Study, n: int, user=None, label: str = "",
                   publication: Publication | None = None) -> list[ParticipantLink]:
    """Make ``n`` single-person links for ``study``."""
    if n < 1 or n > MAX_LINKS_PER_CALL:
        raise PlatformServiceError(f"number of links must be between 1 and {MAX_LINKS_PER_CALL}, got {n}")
    with transaction.atomic():
        links = [
            ParticipantLink(study=study, publication=publication, created_by=user if getattr(user, "pk", None) else None,
                            label=f"{label} {i + 1}".strip() if label else "")
            for i in range(n)
        ]
        ParticipantLink.objects.bulk_create(links)
    return list(ParticipantLink.objects.filter(token__in=[link.token for link in links]).order_by("id"))


def open_link_create(*, study: Study, user=None, completion_code: str = "", max_participants: int | None = None,
                     publication: Publication | None = None) -> OpenLink:
    if max_participants is not None and max_participants < 1:
        raise PlatformServiceError("max_participants must be at least 1, or empty for no limit")
    completion_code = completion_code.strip()
    if completion_code and (len(completion_code) > 64 or not completion_code.replace("-", "").isalnum()):
        raise PlatformServiceError("completion code: use up to 64 letters, digits or dashes")
    link = OpenLink(study=study, publication=publication, max_participants=max_participants,
                    created_by=user if getattr(user, "pk", None) else None)
    if completion_code:
        link.completion_code = completion_code
    link.full_clean()
    link.save()
    return link


def participant_link_redeem(*, token: str, visitor_id: str = "") -> tuple[Participant, ParticipantLink | OpenLink]:
    """Who is arriving through the link ``token``.

    Single-person link: the first visit creates its participant; every later visit returns the
    same one (a reload resumes). Open link: each new visitor becomes a new participant; pass the
    same ``visitor_id`` (e.g. from a signed cookie) to get the same participant back, and the
    link's ``max_participants`` counts distinct visitors. Raises ``LinkInvalid`` (unknown token)
    or ``LinkClosed`` (revoked, inactive or full)."""
    token = (token or "").strip()
    if not token or len(token) > 64:
        raise LinkInvalid("This link is not valid: check that it was copied completely.")
    with transaction.atomic():
        link = ParticipantLink.objects.select_for_update().filter(token=token).first()
        if link is not None:
            if link.revoked:
                raise LinkClosed("This link was withdrawn by the researcher.")
            if link.participant_id is None:
                participant = Participant.objects.create(
                    platform=Platform.LINK, external_id=f"link-{link.pk}-{secrets.token_hex(6)}"
                )
                link.participant = participant
                link.redeemed_at = timezone.now()
                link.save(update_fields=["participant", "redeemed_at"])
            return link.participant, link
        open_link = OpenLink.objects.select_for_update().filter(token=token).first()
        if open_link is None:
            raise LinkInvalid("This link is not valid: check that it was copied completely.")
        if not open_link.active:
            raise LinkClosed("This link is closed.")
        visitor_id = (visitor_id or "").strip()[:100]
        if visitor_id:
            existing = Participant.objects.filter(
                platform=Platform.LINK, external_id=f"open-{open_link.pk}-{visitor_id}"
            ).first()
            if existing is not None:
                return existing, open_link
        if open_link.max_participants is not None and open_link.n_participants >= open_link.max_participants:
            raise LinkClosed("This study is full: all places were taken.")
        participant = Participant.objects.create(
            platform=Platform.LINK,
            external_id=f"open-{open_link.pk}-{visitor_id or secrets.token_hex(8)}",
        )
        OpenLink.objects.filter(pk=open_link.pk).update(n_participants=F("n_participants") + 1)
        open_link.refresh_from_db()
        return participant, open_link


def links_close(*, study: Study) -> dict:
    """Revoke unused single-person links and deactivate open links (used ones keep working so a
    participant can finish)."""
    with transaction.atomic():
        revoked = ParticipantLink.objects.filter(study=study, participant__isnull=True, revoked=False).update(
            revoked=True
        )
        closed = OpenLink.objects.filter(study=study, active=True).update(active=False)
    return {"revoked_links": revoked, "closed_open_links": closed}
