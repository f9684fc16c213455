"""A study closed while it is being published (``study_close`` from another request or task while
``study_publish`` is still making HITs, the Prolific study or links): the publish stops creating,
ends without an error on the closed publication, and whatever a call in flight made after the
close had read the publication is stopped through an audited call (a HIT expired once, the
Prolific study stopped). Before, the publish went on making HITs on the closed publication and
failed moving it closed -> published, leaving those HITs live with nothing to expire them."""
from __future__ import annotations

import pytest

from annotations.models import PlatformCall, Publication
from annotations.platforms.mturk import EXPIRE_NOW
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms import publish as publish_module
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.tokens import publication_request_token
from studies.models import Study
from tests.annotations.platforms.conftest import on_platform
from tests.annotations.platforms.mturk_stubs import HIT_A, HIT_B, hit, hit_params


def _close_after(patch, owner, name: str, study, *, on_call: int = 1) -> None:
    """``owner.name`` does its work, then (on its ``on_call``-th call) the study is closed, as
    another request would close it while the publish waits for the platform's answer."""
    real = getattr(owner, name)
    seen = {"n": 0}

    def wrapped(*args, **kwargs):
        result = real(*args, **kwargs)
        seen["n"] += 1
        if seen["n"] == on_call:
            study_close(user=OPERATOR, study=Study.objects.get(pk=study.pk))
        return result

    patch.setattr(owner, name, wrapped)


def _expire(stubber, hit_id: str) -> None:
    stubber.add_response("update_expiration_for_hit", {}, {"HITId": hit_id, "ExpireAt": EXPIRE_NOW})


def _expire_calls() -> dict[str, str]:
    """HIT id -> status of the audited expire calls made for one HIT each."""
    return {c.request_summary["external_ids"][0]["hit_id"]: c.status
            for c in PlatformCall.objects.filter(operation="expire_hit", idempotency_key__startswith="mturk:expire_hit:")}


def test_closed_while_the_first_hit_is_made_no_further_hit_and_that_hit_is_expired(mturk, study):
    on_platform(study, "mturk")
    platform, stubber = mturk
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_A, 9), hit_params(study, index=0, size=9))
    _expire(stubber, HIT_A)  # the close read no HIT: the publish expires the one it recorded after

    with pytest.MonkeyPatch.context() as patch:
        _close_after(patch, platform, "publish", study)
        publication = study_publish(user=OPERATOR, study=study, platform_name="mturk")  # no TransitionError

    stubber.assert_no_pending_responses()  # no second create_hit, HIT_A expired
    assert publication.status == Publication.Status.CLOSED
    publication.refresh_from_db()
    assert publication.status == Publication.Status.CLOSED and publication.hit_ids == [HIT_A]
    assert PlatformCall.objects.filter(operation="create_hit").count() == 1
    assert _expire_calls() == {HIT_A: "confirmed"}
    study.refresh_from_db()
    assert study.status == Study.Status.CLOSED


def test_closed_while_the_second_hit_is_made_both_hits_are_expired_once(mturk, study):
    on_platform(study, "mturk")
    platform, stubber = mturk
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_A, 9), hit_params(study, index=0, size=9))
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5))
    _expire(stubber, HIT_A)  # by the close: HIT_A was recorded when it read the publication
    _expire(stubber, HIT_B)  # by the publish, which recorded HIT_B on the closed publication

    with pytest.MonkeyPatch.context() as patch:
        _close_after(patch, platform, "publish", study, on_call=2)
        publication = study_publish(user=OPERATOR, study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    publication.refresh_from_db()
    assert publication.status == Publication.Status.CLOSED and publication.hit_ids == [HIT_A, HIT_B]
    close = PlatformCall.objects.get(idempotency_key=f"mturk:close:{publication.request_token}")
    assert close.status == "confirmed" and close.response["expired"] == [HIT_A]
    assert _expire_calls() == {HIT_B: "confirmed"}  # HIT_A was not expired a second time

    study_close(user=OPERATOR, study=study)  # closing again sends nothing (no response queued)


def test_closed_before_the_first_hit_nothing_is_created(mturk, study):
    on_platform(study, "mturk")
    platform, stubber = mturk
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})

    with pytest.MonkeyPatch.context() as patch:
        _close_after(patch, platform, "balance", study)
        publication = study_publish(user=OPERATOR, study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    assert publication.status == Publication.Status.CLOSED and publication.external_ids == []
    assert not PlatformCall.objects.filter(operation="create_hit").exists()


def test_a_publish_refused_after_the_close_keeps_the_publication_closed_with_its_error(mturk, study):
    on_platform(study, "mturk")
    platform, stubber = mturk
    stubber.add_response("get_account_balance", {"AvailableBalance": "1.00"}, {})

    with pytest.MonkeyPatch.context() as patch, pytest.raises(PlatformServiceError, match="balance"):
        _close_after(patch, platform, "balance", study)
        study_publish(user=OPERATOR, study=study, platform_name="mturk")  # the balance's error, not a TransitionError

    stubber.assert_no_pending_responses()
    publication = Publication.objects.get()
    assert publication.status == Publication.Status.CLOSED and "balance" in publication.error


def test_a_link_publish_refused_after_the_close_stays_closed(study):
    """The links are made under the publication's lock (``_publish_links``), so a close from another
    request waits for that transaction: here it lands after the refusal rolled back and before the
    error is recorded."""
    real_error = publish_module._publication_error

    def refused(*, study, **kwargs):
        raise PlatformServiceError("number of links refused")

    def closed_then_recorded(publication, message):
        study_close(user=OPERATOR, study=Study.objects.get(pk=publication.study_id))
        real_error(publication, message)

    with pytest.MonkeyPatch.context() as patch, pytest.raises(PlatformServiceError, match="refused"):
        patch.setattr(publish_module, "links_generate", refused)
        patch.setattr(publish_module, "_publication_error", closed_then_recorded)
        study_publish(user=OPERATOR, study=study, platform_name="link")  # not closed -> failed

    publication = Publication.objects.get()
    assert publication.status == Publication.Status.CLOSED and "refused" in publication.error


def test_a_publish_that_finishes_while_the_close_expires_has_its_late_hit_expired_by_the_close(mturk, study):
    """The close reads the publication (HIT_A recorded, HIT_B's create sent but not recorded), and
    while it expires HIT_A a retried publish records HIT_B and finishes: the close, on closing the
    publication, expires HIT_B too."""
    on_platform(study, "mturk")
    platform, stubber = mturk
    token = publication_request_token(study=study, platform="mturk", batch=1)
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_A, 9), hit_params(study, index=0, size=9))
    stubber.add_response("create_hit", hit(HIT_B, 5, f"{token}-h1"), hit_params(study, index=1, size=5))
    real_publish = platform.publish
    made = {"n": 0}

    def second_answer_lost(**kwargs):
        task = real_publish(**kwargs)
        made["n"] += 1
        if made["n"] == 2:
            raise RuntimeError("worker killed before recording HIT_B")
        return task

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "publish", second_answer_lost)
        study_publish(user=OPERATOR, study=study, platform_name="mturk")
    assert Publication.objects.get().status == Publication.Status.PUBLISHING

    # The retried publish (balance, list_hits finds HIT_B) runs while the close expires HIT_A.
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("list_hits", {"HITs": [hit(HIT_B, 5, f"{token}-h1")["HIT"]], "NumResults": 1},
                         {"MaxResults": 100})
    _expire(stubber, HIT_A)
    _expire(stubber, HIT_B)
    real_close = platform.close
    retried = {}

    def publish_finishes_meanwhile(*, external_ids):
        if not retried:  # the close's own expire (not the one it sends afterwards for HIT_B)
            retried["publication"] = study_publish(user=OPERATOR, study=Study.objects.get(pk=study.pk),
                                                   platform_name="mturk")
        return real_close(external_ids=external_ids)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "close", publish_finishes_meanwhile)
        study_close(user=OPERATOR, study=study)

    stubber.assert_no_pending_responses()
    assert retried["publication"].status == Publication.Status.PUBLISHED  # it finished before the close moved
    publication = Publication.objects.get()
    assert publication.status == Publication.Status.CLOSED and publication.hit_ids == [HIT_A, HIT_B]
    assert _expire_calls() == {HIT_B: "confirmed"}


def test_prolific_closed_after_the_draft_is_never_published(prolific, study):
    on_platform(study, "prolific")
    platform, server = prolific

    with pytest.MonkeyPatch.context() as patch:
        _close_after(patch, platform, "create_study", study)
        publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")

    assert publication.status == Publication.Status.CLOSED
    assert server.calls("POST", r"/api/v1/studies/\w+/transition/") == []  # no PUBLISH
    assert server.studies[publication.prolific_study_id]["status"] == "UNPUBLISHED"
    assert not PlatformCall.objects.filter(operation="publish_study").exists()


def test_prolific_closed_while_publishing_ends_stopped_without_an_error(prolific, study):
    on_platform(study, "prolific")
    platform, server = prolific

    with pytest.MonkeyPatch.context() as patch:
        _close_after(patch, platform, "publish_study", study)
        publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")

    assert publication.status == Publication.Status.CLOSED
    assert server.studies[publication.prolific_study_id]["status"] == "AWAITING REVIEW"
    actions = [c["body"]["action"] for c in server.calls("POST", r"/api/v1/studies/\w+/transition/")]
    assert actions == ["PUBLISH", "STOP"]  # stopped once: the close's stop came after the publish


def test_links_made_while_the_study_closes_are_withdrawn(study):
    with pytest.MonkeyPatch.context() as patch:
        _close_after(patch, publish_module, "links_generate", study)
        publication = study_publish(user=OPERATOR, study=study, platform_name="link")

    publication.refresh_from_db()
    assert publication.status == Publication.Status.CLOSED
    assert publication.participant_links.count() == publication.n_tasks
    assert not publication.participant_links.filter(revoked=False).exists()


def test_a_stop_that_failed_is_tried_again_by_closing_again(mturk, study):
    on_platform(study, "mturk")
    # The publish recorded HIT_A after the close had read the publication, and MTurk refused to
    # expire it: the HIT may still be live, and the error says so on the publication. Closing the
    # study again expires it (before, a closed publication was never looked at again) and clears it.
    platform, stubber = mturk
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_A, 9), hit_params(study, index=0, size=9))
    stubber.add_client_error("update_expiration_for_hit", service_error_code="RequestError",
                             service_message="This HIT is currently in the state 'Reviewing'.", http_status_code=400,
                             expected_params={"HITId": HIT_A, "ExpireAt": EXPIRE_NOW})
    with pytest.MonkeyPatch.context() as patch, pytest.raises(PlatformServiceError, match="may still be recruiting"):
        _close_after(patch, platform, "publish", study)
        study_publish(user=OPERATOR, study=study, platform_name="mturk")
    publication = Publication.objects.get(study=study)
    assert publication.status == Publication.Status.CLOSED and "may still be recruiting" in publication.error

    _expire(stubber, HIT_A)
    study_close(user=OPERATOR, study=Study.objects.get(pk=study.pk))

    stubber.assert_no_pending_responses()
    publication.refresh_from_db()
    assert publication.error == "" and _expire_calls() == {HIT_A: PlatformCall.Status.CONFIRMED}
    study_close(user=OPERATOR, study=Study.objects.get(pk=study.pk))  # nothing left to stop: nothing sent
