"""Once MTurk is closed (``mturk.mturk_closed_reason``, the one rule), a published batch is wound
down, never grown: ``study_add_assignments`` (new paid work) is refused before anything is sent,
on the real MTurk client wrapped by botocore's Stubber."""
from __future__ import annotations

import pytest

from annotations.models import PlatformCall
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.common import OP
from annotations.services.platforms.publish import study_add_assignments
from tests.annotations.platforms.mturk_stubs import HIT_A, HIT_B, published


def test_no_assignments_are_added_once_mturk_is_closed(mturk, study, settings):
    platform, stubber = mturk
    publication = published(stubber, study)  # before the closure (the fixture treats MTurk as open)
    stubber.assert_no_pending_responses()
    settings.RL_MTURK_CLOSED_ON = "2026-09-30"  # the default: closed now
    # What MTurk would answer were the HITs grown (HIT B has room for 4 more): none of it may be asked.
    stubber.add_response("get_hit", {"HIT": {"HITId": HIT_A, "MaxAssignments": 9, "NumberOfAssignmentsAvailable": 0}},
                         {"HITId": HIT_A})
    stubber.add_response("get_hit", {"HIT": {"HITId": HIT_B, "MaxAssignments": 5, "NumberOfAssignmentsAvailable": 1}},
                         {"HITId": HIT_B})
    stubber.add_response("create_additional_assignments_for_hit", {}, {
        "HITId": HIT_B, "NumberOfAdditionalAssignments": 4, "UniqueRequestToken": f"{publication.request_token}-x1-9"})

    with pytest.raises(PlatformServiceError) as refused:
        study_add_assignments(user=OPERATOR, study=study)

    message = refused.value.message
    assert "cannot get more MTurk assignments" in message and "closed Mechanical Turk for good on 2026-09-30" in message
    assert "Nothing more was sent; added before: nothing" in message
    assert not PlatformCall.objects.filter(study=study, operation=OP.ADD_ASSIGNMENTS).exists()
    with pytest.raises(AssertionError):  # the three answers queued above are still waiting: nothing was asked
        stubber.assert_no_pending_responses()
