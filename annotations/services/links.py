"""Plain participant links: making single-person links and open links. No money moves.

Making or withdrawing a link recruits for a study (or stops it), so each service here takes the
acting user and checks their right on the study first (``platforms.access.access_study``), as
publishing does: the publish page, ``study_publish`` (which makes a link publication's links),
the ``make_links`` command (as ``OPERATOR``) and any later caller get the same answer.

Links recruit for the study's own platform only: made outside a publish (``make_links``, the
publish page's link buttons: no ``publication``), they are refused unless the study runs on
participant links (``platforms.common.publish_platform``, the rule every publish follows: a
worker who comes by a link to an MTurk or Prolific study is never paid there) and is a draft or
open (``_links_recruit_check``; a closed study never recruits again, as ``study_publish`` refuses
it). A link publication's own links (``study_publish``) were checked by that publish.

Workers redeem them on the worker pages (``annotations.views.entry``, through
``annotations.services.participants.participant_link_redeem`` and ``open_link_join``).
"""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.urls import NoReverseMatch, reverse

from annotations.models import OpenLink, ParticipantLink, Publication
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import CLOSE, PUBLISH, access_study
from annotations.services.platforms.common import publish_platform
from studies.models import Platform, Study

# URL shapes of the questionnaire's link views (annotations.platforms): /w/l/<token>/ for a
# single-person link, /w/o/<token>/ for an open link.
SINGLE_LINK_PATH = "/w/l/{token}/"
OPEN_LINK_PATH = "/w/o/{token}/"
MAX_LINKS_PER_CALL = 10_000
MAX_OPEN_LINK_PARTICIPANTS = 2_147_483_647  # the largest value OpenLink.max_participants can store


def link_public_url(link: ParticipantLink | OpenLink) -> str:
    is_open = isinstance(link, OpenLink)
    try:
        path = reverse("annotations:open_link_entry" if is_open else "annotations:link_entry", args=[link.token])
    except NoReverseMatch:  # the worker URLs are not mounted (e.g. a trimmed URLconf)
        path = (OPEN_LINK_PATH if is_open else SINGLE_LINK_PATH).format(token=link.token)
    return settings.RL_PUBLIC_URL + path


def _links_recruit_check(*, study: Study, publication: Publication | None) -> None:
    """Inside the transaction that makes the links: refuse (``PlatformServiceError``) links made
    outside a publish (no ``publication``) for ``study``, read again under its row lock (a close or
    a platform change waits), unless it runs on participant links (``publish_platform``'s refusal,
    the one for every publish on another platform than the study's) and is not closed (closed is
    final: ``study_publish`` refuses it, through ``study_open``). A draft may get links; they start
    a task once it opens. A publication's links were checked by its publish, which stops on a close."""
    if publication is not None:
        return
    locked = Study.objects.select_for_update().get(pk=study.pk)
    publish_platform(study=locked, platform_name=Platform.LINK)
    if locked.status == Study.Status.CLOSED:
        raise PlatformServiceError(f"study {locked.name!r} is closed: no links were made; copy it to run it "
                                   "again (Copy this study, on the study page)")


def links_generate(*, study: Study, n: int, user, label: str = "",
                   publication: Publication | None = None) -> list[ParticipantLink]:
    """Make ``n`` single-person links for ``study`` as ``user``, who needs the right to publish it
    (``PlatformAccessDenied`` otherwise, before anything is checked or made). Without
    ``publication``, refused for a study on another platform or closed (``_links_recruit_check``)."""
    access_study(user=user, study=study, access=PUBLISH)
    if n < 1 or n > MAX_LINKS_PER_CALL:
        raise PlatformServiceError(f"number of links must be between 1 and {MAX_LINKS_PER_CALL}, got {n}")
    label_max = ParticipantLink._meta.get_field("label").max_length - len(f" {n}")
    if len(label) > label_max:
        raise PlatformServiceError(f"the links' label is {len(label)} characters long: use at most {label_max}")
    with transaction.atomic():
        _links_recruit_check(study=study, publication=publication)
        links = [
            ParticipantLink(study=study, publication=publication, created_by=user if getattr(user, "pk", None) else None,
                            label=f"{label} {i + 1}".strip() if label else "")
            for i in range(n)
        ]
        ParticipantLink.objects.bulk_create(links)
    return list(ParticipantLink.objects.filter(token__in=[link.token for link in links]).order_by("id"))


def open_link_create(*, study: Study, user, completion_code: str = "", max_participants: int | None = None,
                     publication: Publication | None = None) -> OpenLink:
    """An open link for ``study``, made by ``user``, who needs the right to publish it
    (``PlatformAccessDenied`` otherwise). Bad values raise :class:`PlatformServiceError` naming
    the field; without ``publication``, refused for a study on another platform or closed
    (``_links_recruit_check``)."""
    access_study(user=user, study=study, access=PUBLISH)
    if max_participants is not None and not 1 <= max_participants <= MAX_OPEN_LINK_PARTICIPANTS:
        raise PlatformServiceError(
            f"The open link's places (max_participants) must be between 1 and {MAX_OPEN_LINK_PARTICIPANTS}, "
            "or empty for no limit"
        )
    completion_code = completion_code.strip()
    if completion_code and (len(completion_code) > 64 or not completion_code.replace("-", "").isalnum()):
        raise PlatformServiceError("completion code: use up to 64 letters, digits or dashes")
    link = OpenLink(study=study, publication=publication, max_participants=max_participants,
                    created_by=user if getattr(user, "pk", None) else None)
    if completion_code:
        link.completion_code = completion_code
    try:
        link.full_clean()
    except ValidationError as exc:  # the model's own checks: the researcher's message, never a 500
        raise PlatformServiceError("; ".join(
            f"{name}: {' '.join(errors)}" for name, errors in exc.message_dict.items()
        )) from None
    with transaction.atomic():
        _links_recruit_check(study=study, publication=publication)
        link.save()
    return link


def links_close(*, study: Study, user) -> dict:
    """Revoke unused single-person links and deactivate open links (used ones keep working so a
    participant can finish). ``user`` needs the right to close the study (``study_close`` calls
    this for a link publication)."""
    access_study(user=user, study=study, access=CLOSE)
    with transaction.atomic():
        revoked = ParticipantLink.objects.filter(study=study, participant__isnull=True, revoked=False).update(
            revoked=True
        )
        closed = OpenLink.objects.filter(study=study, active=True).update(active=False)
    return {"revoked_links": revoked, "closed_open_links": closed}


def link_revoke(*, link: ParticipantLink, user) -> ParticipantLink:
    """Withdraw one single-person link: it can no longer be redeemed (a task already started through
    it can still be finished from the browser that holds it). Idempotent. ``user`` needs the right
    to close the link's study (stopping recruitment), as ``study_close`` does."""
    access_study(user=user, study=link.study_id, access=CLOSE)
    ParticipantLink.objects.filter(pk=link.pk, revoked=False).update(revoked=True)
    link.refresh_from_db(fields=["revoked"])
    return link
