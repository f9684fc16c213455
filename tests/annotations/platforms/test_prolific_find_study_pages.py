"""Reconciling a Prolific study creation whose answer was lost reads the whole studies listing
(``GET studies/``, page by page through ``_links.next``), with the same guards as the submissions
listing (``ProlificPlatform._pages``): a draft made before a crash on page 2 or later is found, not
made again, and a listing that cannot be read to its end is no proof the draft was never made. Run
against the local Prolific server, which pages its studies listing (``PAGE_SIZE`` a page)."""
from __future__ import annotations

import pytest

from annotations.models import PlatformCall, Publication
from annotations.platforms.base import PlatformError
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.calls import REQUEST_IN_FLIGHT
from tests.annotations.platforms.conftest import PROLIFIC_TOKEN, on_platform, publish_on
from tests.annotations.platforms.prolific_server import PAGE_SIZE, FakeProlific
from tests.clock import clock_installed

GUARD = 40  # a misbehaving listing ends after this many pages, so an unguarded reader still returns


@pytest.fixture
def study(db, study):
    return on_platform(study, "prolific")


@pytest.fixture
def elsewhere():
    """Another server on 127.0.0.1 (another port): where a hostile ``next`` link points."""
    server = FakeProlific(token=PROLIFIC_TOKEN)
    server.start()
    yield server
    server.stop()


def _crash_after_create(platform, study, monkeypatch):
    """Publish ``study``, the worker dying once Prolific has made its draft and before the answer is
    kept; then the clock moves past ``REQUEST_IN_FLIGHT``, so the lost answer is no longer awaited:
    what the listing shows (or fails to show) decides whether the creation is sent again."""
    clock = clock_installed(monkeypatch)
    real_create = platform.create_study

    def create_then_die(**kwargs):
        real_create(**kwargs)
        raise RuntimeError("worker killed")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "create_study", create_then_die)
        publish_on(study, "prolific")
    clock.advance(seconds=REQUEST_IN_FLIGHT.total_seconds() + 1)


def _studies_listing(server, *, next_href):
    """Make ``server`` list all its studies on every page, ``next_href(page)`` as each page's next
    link (until ``GUARD`` pages), a count of one page's worth; returns the queries of the pages read."""
    pages = []

    def listing(*, body, query):
        pages.append(query)
        href = next_href(len(pages)) if len(pages) < GUARD else None
        return 200, {"results": [{"id": s["id"], "name": s["name"], "internal_name": s.get("internal_name", ""),
                                  "status": s["status"]} for s in server.studies.values()],
                     "_links": {"next": {"href": href}}, "meta": {"count": len(server.studies)}}

    server._list_studies = listing
    return pages


def test_a_draft_on_a_later_page_is_found_after_a_crash_and_not_made_again(prolific, study, monkeypatch):
    platform, server = prolific
    for n in range(2 * PAGE_SIZE + 1):  # the researcher's other studies fill pages 1 and 2
        server.add_study(name=f"Earlier study {n}", internal_name=f"other-{n}")
    _crash_after_create(platform, study, monkeypatch)
    [draft] = [s for s in server.studies.values() if s["name"] == study.name]

    publication = publish_on(study, "prolific")

    assert len(server.calls("POST", r"/api/v1/studies/")) == 1  # found through GET studies/, not made again
    assert publication.prolific_study_id == draft["id"]
    assert publication.status == Publication.Status.PUBLISHED
    pages = [c["query"].get("page", ["1"]) for c in server.calls("GET", r"/api/v1/studies/")]
    assert pages == [["1"], ["2"], ["3"]]


def test_find_study_reads_every_page_and_says_none_only_after_the_last(prolific):
    platform, server = prolific
    for n in range(3 * PAGE_SIZE):
        server.add_study(internal_name=f"other-{n}")
    wanted = server.add_study(internal_name="token-on-page-4", status="UNPUBLISHED")

    found = platform.find_study(internal_name="token-on-page-4")
    missing = platform.find_study(internal_name="never-made")

    assert found.external_id == wanted["id"] and found.recovered
    assert found.response == {"id": wanted["id"], "status": "UNPUBLISHED"}
    assert missing is None
    assert len(server.calls("GET", r"/api/v1/studies/")) == 4 + 4  # all four pages, each time


def test_a_relative_next_link_is_followed_from_the_page_it_came_from(prolific):
    platform, server = prolific
    wanted = server.add_study(internal_name="token")
    pages = []

    def listing(*, body, query):  # page 1 empty, linking to page 2 relatively; page 2 holds the draft
        pages.append(query.get("page"))
        first = len(pages) == 1
        return 200, {"results": [] if first else [wanted], "meta": {"count": 1},
                     "_links": {"next": {"href": "?page=2" if first else None}}}

    server._list_studies = listing

    assert platform.find_study(internal_name="token").external_id == wanted["id"]
    assert pages == [None, ["2"]]


@pytest.mark.parametrize("where", ["other port", "other host", "other path"])
def test_a_next_link_off_the_api_is_not_followed_and_gets_no_token(prolific, elsewhere, where):
    platform, server = prolific
    server.add_study(internal_name="other")
    port = server.base.rsplit(":", 1)[1]
    href = {
        "other port": f"{elsewhere.api_url}studies/?page=2",
        "other host": f"http://localhost:{port}/api/v1/studies/?page=2",
        "other path": f"{server.base}/elsewhere/?page=2",
    }[where]
    pages = _studies_listing(server, next_href=lambda page: href)

    with pytest.raises(PlatformError, match="link off its API") as refused:
        platform.find_study(internal_name="token")

    assert elsewhere.requests == [] and len(pages) == 1
    assert "nothing was sent" in refused.value.message and PROLIFIC_TOKEN not in refused.value.message


def test_a_studies_listing_whose_next_link_repeats_stops(prolific):
    platform, server = prolific
    server.add_study(internal_name="other")
    pages = _studies_listing(server, next_href=lambda page: f"{server.api_url}studies/?page=2")

    with pytest.raises(PlatformError, match="already given") as refused:
        platform.find_study(internal_name="token")

    assert "Prolific listed the studies" in refused.value.message and "page=2" in refused.value.message
    assert len(pages) == 2  # page 1, then page 2 once: its repeat is not fetched


def test_a_studies_listing_that_never_ends_stops_after_the_pages_its_count_needs(prolific):
    platform, server = prolific
    server.add_study(internal_name="other")
    pages = _studies_listing(server, next_href=lambda page: f"{server.api_url}studies/?page={page + 1}")

    with pytest.raises(PlatformError, match="not read to its end"):
        platform.find_study(internal_name="token")

    assert len(pages) == 6  # one study on a page of one: one page, plus the margin (PAGE_MARGIN), not GUARD


def test_a_listing_not_read_to_its_end_is_no_proof_the_draft_was_never_made(prolific, study, monkeypatch):
    """The reconciliation cannot tell, so the creation is not sent again: no second study (and no
    second bill) for a draft past the pages that could be read."""
    platform, server = prolific
    for n in range(2 * PAGE_SIZE):
        server.add_study(internal_name=f"other-{n}")
    _crash_after_create(platform, study, monkeypatch)
    real = server._list_studies

    def listing(*, body, query):  # page 2's next link sends the reader back to page 2
        status, payload = real(body=body, query=query)
        if query.get("page") == ["2"]:
            payload["_links"]["next"]["href"] = f"{server.api_url}studies/?page=2"
        return status, payload

    server._list_studies = listing

    with pytest.raises(PlatformServiceError, match="already given"):
        publish_on(study, "prolific")

    assert len(server.calls("POST", r"/api/v1/studies/")) == 1
    assert not PlatformCall.objects.filter(operation="create_study", status=PlatformCall.Status.CONFIRMED).exists()
