"""A HIT MTurk made (its create_hit call confirmed) whose id the publish never wrote on the
publication (the process died between MTurk's answer and ``publication_add_external_id``): the
publication stays "publishing" listing no HIT. Closing the study expires that HIT all the same
(``publish.publication_hits_on_platform``: the recorded HITs and those of the publication's
confirmed create_hit calls). Before, the close expired ``publication.external_ids`` (none) and
the HIT stayed live on MTurk, recruiting for a closed study."""
from __future__ import annotations

import pytest

from annotations.models import PlatformCall, Publication
from annotations.services.platforms import publish as publish_module
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import study_publish
from studies.models import Study
from tests.annotations.platforms.conftest import on_platform
from tests.annotations.platforms.mturk_stubs import HIT_A, hit, hit_params, queue_expire


def _publish_dies_after_first_hit(patch, stubber, study) -> None:
    """``study`` published on the stubbed MTurk: HIT_A is created (its call confirmed), then the
    process dies before recording it on the publication."""
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_A, 9), hit_params(study, index=0, size=9))

    def crash(*args, **kwargs):
        raise RuntimeError("worker killed")

    patch.setattr(publish_module, "publication_add_external_id", crash)
    with pytest.raises(RuntimeError):
        study_publish(user=OPERATOR, study=study, platform_name="mturk")


def test_close_expires_a_confirmed_hit_the_publication_never_recorded(mturk, study):
    on_platform(study, "mturk")
    _, stubber = mturk
    with pytest.MonkeyPatch.context() as patch:
        _publish_dies_after_first_hit(patch, stubber, study)
    publication = Publication.objects.get(study=study, dry_run=False)
    assert publication.status == Publication.Status.PUBLISHING and publication.external_ids == []
    assert PlatformCall.objects.get(operation="create_hit").status == PlatformCall.Status.CONFIRMED

    queue_expire(stubber, HIT_A)  # once: by the close's call, not again by the stop after it
    study_close(user=OPERATOR, study=Study.objects.get(pk=study.pk))

    stubber.assert_no_pending_responses()
    close = PlatformCall.objects.get(idempotency_key=f"mturk:close:{publication.request_token}")
    assert close.status == PlatformCall.Status.CONFIRMED and close.response["expired"] == [HIT_A]
    assert not PlatformCall.objects.filter(idempotency_key__startswith="mturk:expire_hit:").exists()
    publication.refresh_from_db()
    assert publication.status == Publication.Status.CLOSED and publication.error == ""

