"""Close a study: its own status and the platform side too (HITs expired, the Prolific study
stopped, links closed). Blocking a worker is ``blocks``, messaging workers ``notify``."""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from annotations.models import Publication
from annotations.platforms import get_platform
from annotations.platforms.base import PlatformError
from annotations.services.links import links_close
from annotations.services.payments import CallSpec, PlatformServiceError, platform_call_execute
from studies.models import Platform, Study

from .access import CLOSE, access_study
from .common import OP, actor
from .publish import STILL_RECRUITING, publication_hits_on_platform, publication_recruiting_stop


def study_close(*, user, study: Study) -> list[Publication]:
    """The one way to close a study, as ``user`` (CHANGE access, ``access.access_study``): stop
    recruiting on its platform (expire the HITs, stop the Prolific study, close the links), then
    move the study to closed through ``Study.STATUS``. Work already started can still be
    submitted and reviewed. Idempotent. Returns the publications it closed.

    A person closes as themselves (the study admin's close); the app's own early-stop close
    (``stopping.study_close_when_decided``, every unit decided) acts as ``access.OPERATOR``, not
    as the study's owner, so its platform calls record no user (``common.actor``)."""
    caller, study = study, access_study(user=user, study=study, access=CLOSE)
    # Every link of the study stops, whether or not a live link publication made it (an open link
    # made on the publish page has none): a closed study never reopens.
    links_close(study=study, user=user)
    closed = []
    publications = Publication.objects.filter(study=study, dry_run=False, status__in=[
        Publication.Status.PUBLISHED, Publication.Status.PUBLISHING])
    for publication in publications:
        if publication.platform != Platform.LINK:
            platform = get_platform(publication.platform)
            if publication.platform == Platform.MTURK:
                # Its HITs on MTurk, those a crash left unrecorded on it included.
                operation, external_ids = OP.EXPIRE_HIT, publication_hits_on_platform(publication)
            else:
                operation, external_ids = OP.STOP_STUDY, publication.external_ids
            try:
                platform_call_execute(
                    spec=CallSpec(platform=publication.platform, operation=operation,
                                  idempotency_key=f"{publication.platform}:close:{publication.request_token}",
                                  request_summary={"external_ids": external_ids},
                                  user=actor(user), study=study, publication=publication),
                    send=lambda ids=external_ids, prov=platform: prov.close(external_ids=ids),
                    reconcile=lambda call: False,
                )
            except PlatformError as exc:
                raise PlatformServiceError(f"closing {publication} failed: {exc.message}") from exc
        with transaction.atomic():
            locked = Publication.objects.select_for_update().get(pk=publication.pk)
            Publication.STATUS.move(locked, Publication.Status.CLOSED, closed_at=timezone.now())
        # A publish in flight may have recorded a HIT (published the Prolific study, made links)
        # after the publication was read above and before it was closed: stopped now. One recorded
        # after this move is stopped by that publish (``publish.publication_add_external_id``).
        publication_recruiting_stop(publication=locked, user=user)
        closed.append(publication)
    # A stop that failed at an earlier close or publish (its error kept on the closed publication:
    # a HIT or Prolific study may still be live) is tried again: closing again is the retry.
    for publication in Publication.objects.filter(study=study, dry_run=False, status=Publication.Status.CLOSED,
                                                  error__contains=STILL_RECRUITING):
        publication_recruiting_stop(publication=publication, user=user)
    with transaction.atomic():
        Study.STATUS.move(Study.objects.select_for_update().get(pk=study.pk), Study.Status.CLOSED)
    # A link made between the first close of the links and the move (``links_generate`` reads the study
    # under its row lock and refuses a closed one, so none is made after it) is stopped now.
    links_close(study=study, user=user)
    study.refresh_from_db(fields=["status", "updated_at"])
    if isinstance(caller, Study):
        caller.refresh_from_db(fields=["status", "updated_at"])  # the caller's instance is closed too
    return closed
