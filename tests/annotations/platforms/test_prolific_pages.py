"""Prolific's submissions listing is read page by page, following each answer's ``_links.next``:
the token goes only to Prolific's API whatever a link names (an absolute link off the API's
scheme, host, port or path is refused before anything is sent), a link that repeats or never ends
stops the listing with an error (the beat task ends), and a submission listed on two pages counts
once. Run through ``study_sync`` against the local Prolific server, made to misbehave here."""
from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest

from annotations.models import Publication
from annotations.platforms.base import PlatformError
from annotations.platforms.prolific import ProlificPlatform
from annotations.services.platforms.sync import study_sync
from tests.annotations.platforms.conftest import PROLIFIC_TOKEN, on_platform, publish_on
from tests.annotations.platforms.prolific_server import FakeProlific

GUARD = 40  # the misbehaving listing ends after this many pages, so an unguarded reader still returns


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


def _listing(server, study_id: str, *, next_href, items=None, count=None):
    """Make ``server`` list ``study_id``'s submissions as ``items`` (default: all of them) on
    every page, with ``next_href(page)`` as each page's next link (until ``GUARD`` pages)."""
    real = server._list_submissions
    pages = []

    def listing(*, body, query, id):
        if id != study_id:
            return real(body=body, query=query, id=id)
        pages.append(query)
        chunk = items if items is not None else [s for s in server.submissions.values() if s["study_id"] == id]
        href = next_href(len(pages)) if len(pages) < GUARD else None
        return 200, {"results": [{k: v for k, v in s.items() if k != "bonus_payments"} for s in chunk],
                     "_links": {"next": {"href": href}},
                     "meta": {"count": count if count is not None else len(chunk)}}

    server._list_submissions = listing
    return pages


def _published(prolific, study):
    platform, server = prolific
    publication = publish_on(study, "prolific")
    server.add_submission(publication.prolific_study_id, participant_id="a" * 24)
    return publication, server


@pytest.mark.parametrize("where", ["other port", "other host", "other path", "other scheme"])
def test_a_next_link_off_the_api_is_not_followed_and_gets_no_token(prolific, study, elsewhere, where):
    publication, server = _published(prolific, study)
    port = server.base.rsplit(":", 1)[1]
    href = {
        "other port": f"{elsewhere.api_url}studies/x/submissions/?page=2",
        "other host": f"http://localhost:{port}/api/v1/studies/x/submissions/?page=2",
        "other path": f"{server.base}/elsewhere/x/?page=2",
        "other scheme": f"https://127.0.0.1:{port}/api/v1/studies/x/submissions/?page=2",
    }[where]
    pages = _listing(server, publication.prolific_study_id, next_href=lambda page: href)

    report = study_sync(study=study)

    assert elsewhere.requests == []  # the token went nowhere but Prolific's API
    assert len(pages) == 1
    assert not any(r["path"].startswith("/elsewhere") for r in server.requests)
    publication.refresh_from_db()
    assert "link off its API" in publication.error and "nothing was sent" in publication.error
    assert PROLIFIC_TOKEN not in publication.error
    assert report.errors


def test_an_absolute_link_outside_the_api_is_refused_before_sending(settings):
    """Directly, on any method: nothing reaches a transport for an address off the API."""
    settings.RL_PROLIFIC_TOKEN = PROLIFIC_TOKEN
    sent = []

    def answer(request):
        sent.append(request)
        return httpx.Response(200, json={})

    platform = ProlificPlatform(base_url="https://api.prolific.com/api/v1/", transport=httpx.MockTransport(answer))
    for url in ("https://attacker.example/api/v1/studies/", "https://api.prolific.com.attacker.example/api/v1/",
                "https://api.prolific.com:8443/api/v1/studies/", "https://user@api.prolific.com/api/v1/studies/",
                "https://api.prolific.com/api/v1/../v2/studies/", "//attacker.example/api/v1/studies/"):
        with pytest.raises(PlatformError, match="nothing was sent"):
            platform._request("GET", url)
    assert sent == []


def test_a_next_link_that_repeats_stops_the_listing(prolific, study):
    publication, server = _published(prolific, study)
    href = f"{server.api_url}studies/{publication.prolific_study_id}/submissions/?page=2"
    pages = _listing(server, publication.prolific_study_id, next_href=lambda page: href)

    report = study_sync(study=study)

    assert len(pages) == 2  # page 1, then page 2 once: its repeat is not fetched
    publication.refresh_from_db()
    assert "already given" in publication.error and "page=2" in publication.error
    assert report.errors
    assert Publication.objects.get(pk=publication.pk).status == Publication.Status.PUBLISHED


def test_a_listing_whose_next_link_never_ends_stops_after_the_pages_its_count_needs(prolific, study):
    publication, server = _published(prolific, study)
    base = f"{server.api_url}studies/{publication.prolific_study_id}/submissions/"
    pages = _listing(server, publication.prolific_study_id, next_href=lambda page: f"{base}?page={page + 1}")

    report = study_sync(study=study)

    # One submission on a page of one: one page needed, plus the margin (PAGE_MARGIN), not GUARD.
    assert len(pages) == 6
    publication.refresh_from_db()
    assert "not read to its end" in publication.error
    assert report.errors


def test_a_submission_listed_on_two_pages_counts_once(prolific, study):
    platform, server = prolific
    publication = publish_on(study, "prolific")
    study_id = publication.prolific_study_id
    subs = [server.add_submission(study_id, participant_id=c * 24) for c in "abc"]
    base = f"{server.api_url}studies/{study_id}/submissions/"
    by_page = {1: subs[:2], 2: subs[1:]}  # the listing moved between the pages: b is on both
    real = server._list_submissions

    def listing(*, body, query, id):
        if id != study_id:
            return real(body=body, query=query, id=id)
        page = int(query.get("page", ["1"])[0])
        return 200, {"results": [{k: v for k, v in s.items() if k != "bonus_payments"} for s in by_page[page]],
                     "_links": {"next": {"href": f"{base}?page=2" if page == 1 else None}}, "meta": {"count": 3}}

    server._list_submissions = listing

    remote = platform.sync(external_ids=publication.external_ids)
    assert sorted(r.platform_assignment_id for r in remote) == sorted(s["id"] for s in subs)
    assert study_sync(study=study).remote == 3


@pytest.mark.parametrize("relative", ["root", "query"], ids=["from the root", "a query only"])
def test_a_relative_next_link_is_read_against_its_page(prolific, study, relative):
    # A next link relative to its page ("/api/v1/studies/<id>/submissions/?page=2", "?page=2") was
    # joined to the API's base address ("/api/v1/api/v1/...", "/api/v1/?page=2"): a 404, and sync failed.
    platform, server = prolific
    publication = publish_on(study, "prolific")
    study_id = publication.prolific_study_id
    subs = [server.add_submission(study_id, participant_id=c * 24) for c in "abc"]
    path = urlsplit(f"{server.api_url}studies/{study_id}/submissions/").path
    link = {"root": f"{path}?page=2", "query": "?page=2"}[relative]
    by_page = {1: subs[:2], 2: subs[2:]}
    real = server._list_submissions

    def listing(*, body, query, id):
        if id != study_id:
            return real(body=body, query=query, id=id)
        page = int(query.get("page", ["1"])[0])
        return 200, {"results": [{k: v for k, v in s.items() if k != "bonus_payments"} for s in by_page[page]],
                     "_links": {"next": {"href": link if page == 1 else None}}, "meta": {"count": 3}}

    server._list_submissions = listing
    remote = platform.sync(external_ids=publication.external_ids)
    assert sorted(r.platform_assignment_id for r in remote) == sorted(s["id"] for s in subs)
