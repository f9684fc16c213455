"""``lab.api.pagination.ApiCursorPagination`` pages a list by a time field without skipping or
repeating rows that share its value. A platform task's ``created_at`` is whole seconds (its landing
time), and answers recorded in the same instant share ``answered_at``; the pager sorted by that
field alone, with DRF's position + offset cursor: on PostgreSQL the tied rows came back in an
arbitrary order per request, so walking ``next`` over ``/api/v1/assignments/?ordering=created_at``
with ``page_size=3`` read 16 rows of which 14 were distinct, and walking ``previous`` back from the
last page lost rows even on SQLite (13 of 16). Now a cursor is the position of a row in the order
(field value, id), and a page is the rows strictly after (or before) it.

Each list here is walked forward (``next`` from the first page) and backward (``previous`` from the
last), at several page sizes, in both directions of the time field, and must give every row exactly
once, in the order (time, id) ascending, or both descending. The tasks are started and answered
through the app's services under a clock that stands on whole seconds, five tasks a second."""
from __future__ import annotations

import base64
import json
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from annotations.models import Annotation, Assignment
from studies.api.tokens import api_token_create
from tests.api.conftest import grant
from tests.clock import clock_installed
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

ASSIGNMENTS, ANNOTATIONS = "/api/v1/assignments/", "/api/v1/annotations/"
TIME_FIELD = {ASSIGNMENTS: "created_at", ANNOTATIONS: "answered_at"}
PAGE_SIZES = (1, 2, 3, 4, 5, 7, 16)
N_TASKS = 16
PER_SECOND = 5


@pytest.fixture(autouse=True)
def _clear_throttle_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def owner():
    return grant(get_user_model().objects.create_user(username="pia", password="pw"), "studies.add_study")


@pytest.fixture
def api(owner) -> APIClient:
    _, key = api_token_create(user=owner, name="t", read_only=True, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def clock(monkeypatch):
    return clock_installed(monkeypatch, timezone.now().replace(microsecond=0) - timedelta(hours=1))


@pytest.fixture
def study(owner, clock):
    """16 tasks of 2 units (gpt3, t5 x 2 items, 8 workers a unit, room for 4 more tasks), started and
    answered five a second on whole seconds: created_at and answered_at tie in fives."""
    study = open_utility_study(name="ties", n_items=2, quota=10, owner=owner)
    start = clock.now
    for w in range(N_TASKS):
        clock.now = start + timedelta(seconds=w // PER_SECOND)
        work(study, f"PID-tie-{w}")
    study.start = start
    return study


def _expected(url: str, study, descending: bool) -> list[int]:
    field = TIME_FIELD[url]
    if url == ASSIGNMENTS:
        rows = Assignment.objects.filter(study=study).exclude(status=Assignment.Status.WITHDRAWN)
    else:
        rows = Annotation.objects.filter(claim__study=study)
    order = (f"-{field}", "-id") if descending else (field, "id")
    return list(rows.order_by(*order).values_list("id", flat=True))


def _get(api, url, params=None) -> dict:
    response = api.get(url, params)
    assert response.status_code == 200, response.content[:300]
    return response.json()


def _ids(page: dict) -> list[int]:
    return [row["id"] for row in page["results"]]


def walk_forward(api, url: str, params: dict, *, between=None) -> list[int]:
    """The ids the pages give, following ``next`` from the first page; ``between(n)`` runs after the
    ``n``-th page."""
    page, ids = _get(api, url, params), []
    for n in range(200):
        ids += _ids(page)
        if between:
            between(n)
        if not page["next"]:
            return ids
        page = _get(api, page["next"])
    raise AssertionError("next never ended")


def walk_backward(api, url: str, params: dict, *, between=None) -> list[int]:
    """The ids the pages give, in list order, following ``previous`` back from the last page (reached
    by ``next``); ``between(n)`` runs after the ``n``-th page read backwards."""
    page = _get(api, url, params)
    while page["next"]:
        page = _get(api, page["next"])
    pages = []
    for n in range(200):
        pages.insert(0, _ids(page))
        if between:
            between(n)
        if not page["previous"]:
            return [pk for ids in pages for pk in ids]
        page = _get(api, page["previous"])
    raise AssertionError("previous never ended")


@pytest.mark.parametrize("url", [ASSIGNMENTS, ANNOTATIONS])
@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
def test_walks_over_tied_times_give_every_row_once(api, study, url, descending):
    field = TIME_FIELD[url]
    expected = _expected(url, study, descending)
    times = _get(api, url, {"ordering": field, "page_size": 1000})["results"]
    assert len(expected) == len(times) >= N_TASKS and len({row[field] for row in times}) <= len(times) / 4, \
        "the rows do not tie"
    for size in PAGE_SIZES:
        params = {"ordering": f"-{field}" if descending else field, "page_size": size}
        forward = walk_forward(api, url, params)
        assert forward == expected, _difference(f"next, page_size={size}", forward, expected)
        backward = walk_backward(api, url, params)
        assert backward == expected, _difference(f"previous, page_size={size}", backward, expected)


def _difference(walk: str, got: list[int], expected: list[int]) -> str:
    missing = len(set(expected) - set(got))
    return (f"{walk}: {len(got)} rows, {len(set(got))} distinct, {missing} of {len(expected)} missing"
            + ("" if missing or len(got) != len(set(got)) else ", out of (time, id) order"))


@pytest.mark.parametrize("url", [ASSIGNMENTS, ANNOTATIONS])
@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
@pytest.mark.parametrize("walk", [walk_forward, walk_backward], ids=["next", "previous"])
def test_rows_added_during_a_walk_skip_no_row_that_was_there(api, study, clock, url, descending, walk):
    """New tasks (and their answers) land in the seconds the walk is passing through, tied with rows
    already read and rows not yet read: each row that was there is still read once and in order, and
    a new one at most once."""
    field = TIME_FIELD[url]
    before = _expected(url, study, descending)
    added = iter(range(4))

    def add_task(n):
        if (w := next(added, None)) is not None:
            clock.now = study.start + timedelta(seconds=(N_TASKS - 1 - 4 * w) // PER_SECOND)
            work(study, f"PID-new-{w}")

    params = {"ordering": f"-{field}" if descending else field, "page_size": 3}
    ids = walk(api, url, params, between=add_task)
    assert next(added, None) is None, "the walk ended before the new tasks were added"
    new = set(_expected(url, study, descending)) - set(before)
    assert new
    assert [pk for pk in ids if pk not in new] == before
    assert len(ids) == len(set(ids)), "a row was read twice"


def test_a_page_of_the_id_order_is_unchanged(api, study):
    """The default order (id) pages as before: ``next`` and ``previous`` give each row once."""
    expected = list(Assignment.objects.filter(study=study).order_by("id").values_list("id", flat=True))
    assert walk_forward(api, ASSIGNMENTS, {"page_size": 3}) == expected
    assert walk_backward(api, ASSIGNMENTS, {"page_size": 3}) == expected
    assert walk_forward(api, ASSIGNMENTS, {"ordering": "-id", "page_size": 3}) == expected[::-1]


def _cursor_of(link: str) -> str:
    return parse_qs(urlsplit(link).query)["cursor"][0]


def _encoded(body) -> str:
    return base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")


def test_a_forged_or_foreign_cursor_is_a_404_saying_invalid_cursor(api, study):
    first = _get(api, ASSIGNMENTS, {"ordering": "created_at", "page_size": 3})
    cursor = _cursor_of(first["next"])
    body = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    assert body["o"] == ["created_at", "id"] and len(body["p"]) == 2
    when, pk = body["p"]
    forged = [
        "not base64!", _encoded([1, 2]), _encoded({**body, "p": [when]}), _encoded({**body, "p": ["2026-13-45", pk]}),
        _encoded({**body, "p": [when, "abc"]}), _encoded({**body, "p": [when, 10**30]}),
        _encoded({**body, "p": [when.replace("+00:00", ""), pk]}), _encoded({**body, "p": [None, pk]}),
        _encoded({**body, "r": 2}), _encoded({**body, "extra": 1}), _encoded({"o": body["o"], "r": 0}),
        base64.urlsafe_b64encode(b"[" * 3000).decode(), "A" * 5000,
    ]
    for bad in forged:
        response = api.get(ASSIGNMENTS, {"ordering": "created_at", "page_size": 3, "cursor": bad})
        assert response.status_code == 404 and response.json()["detail"] == "Invalid cursor", (bad, response.content)
    # A cursor made for one order is not read in another.
    response = api.get(ASSIGNMENTS, {"ordering": "-created_at", "page_size": 3, "cursor": cursor})
    assert response.status_code == 404 and response.json()["detail"] == "Invalid cursor"
    # The genuine one still reads.
    assert _get(api, ASSIGNMENTS, {"ordering": "created_at", "page_size": 3, "cursor": cursor})["results"]


def test_an_empty_page_links_back_to_the_rows_beside_it(api, study):
    """A cursor with no row beyond it (here: a filter that leaves none) gives an empty page whose
    link the other way leads to the rows next to it: ``previous`` after the last row gives the last
    page, ``next`` before the first row gives the first page (its address without a cursor)."""
    t1 = (study.start + timedelta(seconds=1)).isoformat()
    params = {"ordering": "created_at", "page_size": 5}
    first = _get(api, ASSIGNMENTS, params)
    second = _get(api, first["next"])  # the tasks of the second second
    # After the first second's last task, among the tasks started before the second second: none.
    empty = _get(api, ASSIGNMENTS, {**params, "created_before": t1, "cursor": _cursor_of(first["next"])})
    assert empty["results"] == [] and empty["next"] is None
    last = _get(api, empty["previous"])
    assert _ids(last) == _ids(first) and last["previous"] is None
    # Before the second second's first task, among the tasks started from the second second: none.
    empty = _get(api, ASSIGNMENTS, {**params, "created_after": t1, "cursor": _cursor_of(second["previous"])})
    assert empty["results"] == [] and empty["previous"] is None
    assert "cursor" not in empty["next"]
    assert _ids(_get(api, empty["next"])) == _ids(second)


def test_a_cursor_the_earlier_pager_wrote_for_the_id_order_goes_on_from_its_row(api, study):
    """A ``next`` or ``previous`` link saved before this pager shipped (DRF's cursor: base64 of
    ``o=&r=&p=``, its position the id) goes on from the row it names in the id order, so a client
    resuming a sync reads no row twice; one for another order, or with an offset, cannot be placed
    and is a 404 "Invalid cursor"."""
    from rest_framework.pagination import Cursor, CursorPagination

    ids = list(Assignment.objects.filter(study=study).order_by("id").values_list("id", flat=True))

    pager = CursorPagination()
    pager.base_url = "http://testserver/"

    def earlier(*, position, reverse=False, offset=0) -> str:
        return parse_qs(urlsplit(pager.encode_cursor(
            Cursor(offset=offset, reverse=reverse, position=position))).query)["cursor"][0]

    after_third = _get(api, ASSIGNMENTS, {"page_size": 3, "cursor": earlier(position=str(ids[2]))})
    assert _ids(after_third) == ids[3:6]
    before_fifth = _get(api, ASSIGNMENTS, {"page_size": 3, "cursor": earlier(position=str(ids[4]), reverse=True)})
    assert _ids(before_fifth) == ids[1:4]
    for bad in (earlier(position=str(ids[2]), offset=2), earlier(position="x")):
        response = api.get(ASSIGNMENTS, {"page_size": 3, "cursor": bad})
        assert response.status_code == 404 and response.json()["detail"] == "Invalid cursor"
    response = api.get(ASSIGNMENTS, {"ordering": "created_at", "page_size": 3, "cursor": earlier(position=str(ids[2]))})
    assert response.status_code == 404
