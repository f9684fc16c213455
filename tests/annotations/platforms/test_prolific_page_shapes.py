"""A Prolific listing page of a shape the API does not give (a ``next`` link as a plain string,
``_links`` not an object, ``results`` not a list, an item not an object or without a string id) is
a ``PlatformError`` naming what was wrong: the listing was not read to its end. A study's sync
records it and goes on (no AttributeError aborting the sync); reconciling a lost creation through
the studies listing cannot tell, so the creation is not sent again. Run against the local Prolific
server, made to misbehave here."""
from __future__ import annotations

import pytest

from annotations.models import PlatformCall, Publication
from annotations.platforms.base import PlatformError
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.calls import REQUEST_IN_FLIGHT
from annotations.services.platforms.sync import study_sync
from tests.annotations.platforms.conftest import on_platform, publish_on
from tests.clock import clock_installed

# What each misshapen page holds, given the page's real items and the real next link; and the words
# the error names it by.
SHAPES = {
    "next a plain url": (lambda items, href: {"results": items, "_links": {"next": href or "?page=2"}},
                         "_links.next a str"),
    "_links a list": (lambda items, href: {"results": items, "_links": [href]}, "_links a list"),
    "results an object": (lambda items, href: {"results": {"items": items}, "_links": {"next": {"href": None}}},
                          "results a dict"),
    "results a string": (lambda items, href: {"results": "none", "_links": {"next": {"href": None}}},
                         "results a str"),
    "an item a string": (lambda items, href: {"results": ["x", *items], "_links": {"next": {"href": None}}},
                         "result 1 a str"),
    "href a number": (lambda items, href: {"results": items, "_links": {"next": {"href": 2}}},
                      "_links.next.href a int"),
    "an item without an id": (lambda items, href: {"results": [{k: v for k, v in i.items() if k != "id"}
                                                               for i in items],
                                                   "_links": {"next": {"href": None}}}, "id is None"),
}


@pytest.fixture
def study(db, study):
    return on_platform(study, "prolific")


def _misshapen(server, attr: str, shape: str):
    """Make ``server``'s listing ``attr`` answer every page in ``shape`` (from its real answer)."""
    real = getattr(server, attr)

    def listing(**kwargs):
        status, payload = real(**kwargs)
        return status, SHAPES[shape][0](payload["results"], payload["_links"]["next"]["href"])

    setattr(server, attr, listing)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_misshapen_submissions_page_is_a_recorded_sync_error(prolific, study, shape):
    platform, server = prolific
    publication = publish_on(study, "prolific")
    server.add_submission(publication.prolific_study_id, participant_id="a" * 24)
    _misshapen(server, "_list_submissions", shape)

    with pytest.raises(PlatformError, match="not read to its end") as refused:
        platform.sync(external_ids=publication.external_ids)
    report = study_sync(study=study)

    assert SHAPES[shape][1] in refused.value.message
    assert f"the submissions of study {publication.prolific_study_id}" in refused.value.message
    assert report.errors
    publication.refresh_from_db()
    assert "not read to its end" in publication.error
    assert publication.status == Publication.Status.PUBLISHED


@pytest.mark.parametrize("shape", SHAPES)
def test_find_study_on_a_misshapen_page_is_a_platform_error(prolific, shape):
    platform, server = prolific
    server.add_study(internal_name="token")
    _misshapen(server, "_list_studies", shape)

    with pytest.raises(PlatformError, match="not read to its end") as refused:
        platform.find_study(internal_name="token")

    assert SHAPES[shape][1] in refused.value.message and "Prolific listed the studies" in refused.value.message


def test_a_misshapen_studies_page_after_a_lost_creation_is_not_a_second_study(prolific, study, monkeypatch):
    platform, server = prolific
    clock = clock_installed(monkeypatch)
    real_create = platform.create_study

    def create_then_die(**kwargs):
        real_create(**kwargs)
        raise RuntimeError("worker killed")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "create_study", create_then_die)
        publish_on(study, "prolific")
    clock.advance(seconds=REQUEST_IN_FLIGHT.total_seconds() + 1)
    _misshapen(server, "_list_studies", "next a plain url")

    with pytest.raises(PlatformServiceError, match="not read to its end"):
        publish_on(study, "prolific")

    assert len(server.calls("POST", r"/api/v1/studies/")) == 1
    assert not PlatformCall.objects.filter(operation="create_study", status=PlatformCall.Status.CONFIRMED).exists()
