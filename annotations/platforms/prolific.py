"""Prolific through its REST API (https://docs.prolific.com/api-reference), with httpx.

Base URL: the setting ``RL_PROLIFIC_API_URL`` (default ``https://api.prolific.com/api/v1/``). The
API token is the setting ``RL_PROLIFIC_TOKEN`` (declared in ``config/settings`` from the
environment); it is read when a request is made, sent as ``Authorization: Token <token>``, and
never stored, logged or put in an error.

Amounts: study rewards go in the smallest currency unit (pence / cents, an integer); bonus
amounts in the bulk-bonus CSV are decimals in the study currency, as the API documents.
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import logging
import re
from collections.abc import Iterator, Sequence
from decimal import Decimal
from urllib.parse import urljoin, urlsplit

import httpx
from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from lab.spreadsheet import csv_writer
from studies.models import Platform

from .base import (
    CostEstimate,
    CrowdPlatform,
    PlatformConfigError,
    PlatformError,
    PlatformNotFound,
    PlatformTransientError,
    PublishedTask,
    RemoteSubmission,
    TaskSpec,
    money,
    to_minor_units,
)

logger = logging.getLogger(__name__)

# Prolific's participant, study and submission ids: 24-character hexadecimal object ids (the same
# format the worker entry checks, ``annotations.platforms.handoff.PROLIFIC_ID``).
PROLIFIC_ID = re.compile(r"[0-9a-f]{24}")

REJECTION_CATEGORIES = [
    "TOO_QUICKLY", "TOO_SLOWLY", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "FAILED_CHECK",
    "LOW_EFFORT", "MALINGERING", "NO_CODE", "BAD_CODE", "NO_DATA", "UNSUPP_DEVICE", "OTHER",
]
MIN_REJECTION_MESSAGE = 100
# A listing (a study's submissions, the studies) is read page by page (``_links.next``,
# ``ProlificPlatform._pages``): at most this many pages (the count its first page states needs,
# plus PAGE_MARGIN), so a listing whose next link never ends cannot hold a task forever.
MAX_LISTING_PAGES = 1000
PAGE_MARGIN = 5
STATUS_MAP = {
    "AWAITING REVIEW": "submitted",
    "APPROVED": "approved",
    "REJECTED": "rejected",
    "RETURNED": "returned",
    "TIMED-OUT": "expired",
    "ACTIVE": "active",
    "RESERVED": "active",
    "PARTIALLY APPROVED": "approved",
    "SCREENED OUT": "returned",
}
# The submission statuses after which Prolific no longer ends a session unpaid by itself (the worker
# submitted it, or it ended already): not ACTIVE or RESERVED, which time out or are returned later.
# An early-stopping study's close waits until the work that decided its units is listed in one of
# these (``services.stopping._unlisted_deciding_work``); an unknown status counts as active, as
# ``STATUS_MAP`` reads it.
SESSION_SETTLED = frozenset(raw for raw, status in STATUS_MAP.items() if status != "active")


def api_url() -> str:
    url = settings.RL_PROLIFIC_API_URL
    return url if url.endswith("/") else url + "/"


def fee_rate() -> Decimal:
    """Prolific's service fee on rewards and bonuses: ``RL_PROLIFIC_FEE_RATE`` (standard studies
    0.3333; VAT, representative samples and academic rates differ: set your workspace's)."""
    return Decimal(str(settings.RL_PROLIFIC_FEE_RATE))


def currency() -> str:
    return str(settings.RL_PROLIFIC_CURRENCY).upper()


class ProlificPlatform(CrowdPlatform):
    name = Platform.PROLIFIC

    def __init__(self, base_url: str | None = None, transport: httpx.BaseTransport | None = None):
        self.base_url = base_url or api_url()
        self._transport = transport
        self.currency = currency()

    @property
    def endpoint(self) -> str:
        return self.base_url

    def _token(self) -> str:
        token = (settings.RL_PROLIFIC_TOKEN or "").strip()
        if not token:
            raise PlatformConfigError(
                "no Prolific API token: set RL_PROLIFIC_TOKEN in the environment of the web and worker "
                "processes (Prolific > Settings > API tokens)"
            )
        return token

    def _url(self, path: str) -> str:
        """The address ``path`` names: relative, under ``base_url``; absolute (a ``next`` link
        from an answer), only where it is on ``base_url``'s scheme, host and port and under its
        path, else ``PlatformError`` before anything is sent: the token goes to Prolific only,
        whatever an answer links to."""
        try:
            url = urlsplit(path)
            if not url.scheme and not path.startswith("//"):
                return self.base_url + path.lstrip("/")
            base = urlsplit(self.base_url)
            same_origin = (url.scheme.lower(), url.hostname or "", _port(url)) == (
                base.scheme.lower(), base.hostname or "", _port(base))
        except ValueError as exc:  # not an address (a bad IPv6 host, a port that is no number)
            raise PlatformError(f"Prolific: {path[:200]!r} is not an address ({exc}); nothing was sent") from exc
        if (not same_origin or url.username or url.password
                or not url.path.startswith(base.path) or ".." in url.path.split("/")):
            raise PlatformError(f"Prolific answered with a link off its API ({path[:200]!r}, not under "
                                f"{self.base_url}): it was not followed and nothing was sent")
        return path

    def _request(self, method: str, path: str, *, json: dict | None = None, params: dict | None = None) -> dict:
        url = self._url(path)
        headers = {"Authorization": f"Token {self._token()}", "Accept": "application/json"}
        try:
            with httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0), transport=self._transport) as client:
                response = client.request(method, url, json=json, params=params, headers=headers)
        except (httpx.UnsupportedProtocol, httpx.InvalidURL, httpx.LocalProtocolError) as exc:
            # The request could not be built or sent as asked (a bad address): nothing reached
            # Prolific, and sending it again will not help.
            raise PlatformError(f"Prolific {method} {path}: {type(exc).__name__}: {exc}"[:500]) from exc
        except (httpx.TransportError, httpx.StreamError) as exc:
            # Network trouble after the request may have left: the outcome is unknown.
            raise PlatformTransientError(f"Prolific {method} {path}: {type(exc).__name__}") from exc
        if response.status_code == 429 or response.status_code >= 500:
            raise PlatformTransientError(f"Prolific {method} {path}: HTTP {response.status_code}")
        try:
            body = response.json() if response.content else {}
        except ValueError:
            body = {"text": response.text[:500]}
        if response.status_code == 404:
            raise PlatformNotFound(f"Prolific {method} {path}: HTTP 404: {_error_text(body)}",
                                   response=body if isinstance(body, dict) else {"body": body})
        if response.status_code >= 400:
            raise PlatformError(f"Prolific {method} {path}: HTTP {response.status_code}: {_error_text(body)}",
                                response=body if isinstance(body, dict) else {"body": body})
        return body if isinstance(body, dict) else {"results": body}

    def _pages(self, path: str, *, what: str) -> Iterator[list[dict]]:
        """The ``results`` of each page of the listing at ``path`` (``what`` names it in errors),
        following each answer's ``_links.next``: a link relative to the page it came from is
        resolved as a browser would, and every address is held to the API's own by ``_url``. A next
        page already given, or more pages than the first page's ``meta.count`` needs plus
        ``PAGE_MARGIN`` (``_page_limit``, at most ``MAX_LISTING_PAGES``), is a ``PlatformError``:
        the listing was not read to its end. So is a page of another shape (``_page_parts``): its
        ``results`` not a list of objects, its ``_links``/``next`` not objects, its href not a string."""
        fetched: set[str] = set()
        limit = MAX_LISTING_PAGES
        next_path: str | None = path
        while next_path:
            url = self._url(next_path)
            if url in fetched:
                raise PlatformError(f"Prolific listed {what} with a next page it had already given "
                                    f"({url[:200]}): the listing was not read to its end")
            if len(fetched) >= limit:
                raise PlatformError(f"Prolific listed {what} over more than {limit} pages (the pages its count "
                                    "needs plus a margin, at most MAX_LISTING_PAGES): the listing was not read "
                                    "to its end")
            fetched.add(url)
            body = self._request("GET", url)
            results, link = _page_parts(body, what=what, page=len(fetched))
            if len(fetched) == 1:
                limit = _page_limit(body, page_size=len(results))
            yield results
            next_path = urljoin(url, link) if link else None

    # -- estimates ------------------------------------------------------------------------
    def estimate_cost(self, *, spec_reward: Decimal, n_tasks: int, max_assignments_per_hit: int = 9) -> CostEstimate:
        reward = money(spec_reward)
        rewards = money(reward * n_tasks)
        rate = fee_rate()
        fees = money(rewards * rate)
        return CostEstimate(
            platform=self.name, currency=self.currency, n_tasks=n_tasks, reward_per_task=reward, rewards=rewards,
            fee_rate=rate, fees=fees, total=money(rewards + fees),
            notes=[f"Prolific service fee taken as {rate} of rewards (RL_PROLIFIC_FEE_RATE); VAT may apply."],
        )

    def balance(self) -> Decimal | None:
        # The public API has no balance call: top-ups and balances live in the web app.
        return None

    # -- studies --------------------------------------------------------------------------
    def study_payload(self, *, spec: TaskSpec) -> dict:
        return {
            "name": spec.title[:255],
            "internal_name": spec.request_token,
            "description": spec.description,
            "external_study_url": spec.worker_url,
            "prolific_id_option": "url_parameters",
            "completion_codes": [{
                "code": spec.completion_code,
                "code_type": "COMPLETED",
                "actions": [{"action": "MANUALLY_REVIEW"}],
            }],
            "estimated_completion_time": max(1, int(spec.estimated_minutes)),
            # Whole minutes, rounded up: never shorter than the app's own deadline (publish.platform_time_limit).
            "maximum_allowed_time": max(2, (int(spec.assignment_duration_seconds) + 59) // 60),
            "reward": to_minor_units(spec.reward),
            "total_available_places": int(spec.n_tasks),
            "device_compatibility": ["desktop", "tablet", "mobile"],
        }

    def create_study(self, *, spec: TaskSpec) -> PublishedTask:
        body = self._request("POST", "studies/", json=self.study_payload(spec=spec))
        return PublishedTask(external_id=body["id"], max_assignments=spec.n_tasks,
                             response={"id": body["id"], "status": body.get("status", "")})

    def publish_study(self, *, study_id: str) -> dict:
        body = self._request("POST", f"studies/{study_id}/transition/", json={"action": "PUBLISH"})
        return {"id": study_id, "status": body.get("status", "")}

    def get_study(self, *, study_id: str) -> dict:
        return self._request("GET", f"studies/{study_id}/")

    def find_study(self, *, internal_name: str) -> PublishedTask | None:
        """Reconciliation: a draft created before a crash, found by the token we put in internal_name.
        Every page of the studies listing is read (``_pages``) until it is found: None only where
        the whole listing was read without it; a listing that cannot be read to its end is a
        ``PlatformError`` (cannot tell), never "not created"."""
        for results in self._pages("studies/", what="the studies"):
            for study in results:
                if study.get("internal_name") == internal_name:
                    study_id = _listed_id(study, what="the studies")
                    return PublishedTask(external_id=study_id, recovered=True,
                                         response={"id": study_id, "status": study.get("status", "")})
        return None

    def publish(self, *, spec: TaskSpec, index: int = 0, max_assignments: int = 0) -> PublishedTask:
        task = self.create_study(spec=spec)
        self.publish_study(study_id=task.external_id)
        return task

    def was_published(self, *, spec_token: str) -> PublishedTask | None:
        return self.find_study(internal_name=spec_token)

    def sync(self, *, external_ids: list[dict]) -> list[RemoteSubmission]:
        found: list[RemoteSubmission] = []
        seen: set[str] = set()
        for entry in external_ids:
            study_id = entry.get("study_id")
            if not study_id:
                continue
            for results in self._pages(f"studies/{study_id}/submissions/",
                                       what=f"the submissions of study {study_id}"):
                for item in results:
                    item_id = _listed_id(item, what=f"the submissions of study {study_id}")
                    if item_id in seen:
                        continue  # listed again on a later page (the listing moved while it was read)
                    seen.add(item_id)
                    raw = item.get("status", "")
                    found.append(RemoteSubmission(
                        platform_assignment_id=item_id,
                        platform_task_id=item.get("study_id", study_id),
                        worker_id=item.get("participant_id") or item.get("participant", ""),
                        status=STATUS_MAP.get(raw, "active"),
                        raw_status=raw,
                        accepted_at=_parse(item.get("started_at")),
                        submitted_at=_parse(item.get("completed_at")),
                    ))
        return found

    # -- reviews and money -----------------------------------------------------------------
    def approve(self, *, platform_assignment_id: str, feedback: str = "") -> dict:
        platform_assignment_id = prolific_id(platform_assignment_id, what="submission id")
        body = self._request("POST", f"submissions/{platform_assignment_id}/transition/", json={"action": "APPROVE"})
        return {"id": platform_assignment_id, "status": body.get("status", "")}

    def reject(self, *, platform_assignment_id: str, feedback: str, category: str = "") -> dict:
        category = category or "OTHER"
        if category not in REJECTION_CATEGORIES:
            raise PlatformError(f"rejection category {category!r} is not one of Prolific's: "
                                f"{', '.join(REJECTION_CATEGORIES)}")
        if len(feedback.strip()) < MIN_REJECTION_MESSAGE:
            raise PlatformError(
                f"Prolific needs a rejection message of at least {MIN_REJECTION_MESSAGE} characters "
                f"(this one has {len(feedback.strip())}): explain to the participant what went wrong"
            )
        platform_assignment_id = prolific_id(platform_assignment_id, what="submission id")
        body = self._request("POST", f"submissions/{platform_assignment_id}/transition/",
                             json={"action": "REJECT", "message": feedback.strip(), "rejection_category": category})
        return {"id": platform_assignment_id, "status": body.get("status", "")}

    def assignment_status(self, *, platform_assignment_id: str) -> str | None:
        platform_assignment_id = prolific_id(platform_assignment_id, what="submission id")
        body = self._request("GET", f"submissions/{platform_assignment_id}/")
        return STATUS_MAP.get(body.get("status", ""))

    def assignment_id_error(self, platform_assignment_id) -> str | None:
        try:
            prolific_id(platform_assignment_id, what="submission id")
        except PlatformError as exc:
            return exc.message
        return None

    def assignment_owner(self, *, platform_assignment_id: str) -> tuple[str, str] | None:
        platform_assignment_id = prolific_id(platform_assignment_id, what="submission id")
        body = self._request("GET", f"submissions/{platform_assignment_id}/")
        return str(body.get("study_id") or ""), str(body.get("participant_id") or body.get("participant") or "")

    def bonus_setup(self, *, study_external_id: str, submission_id: str, amount: Decimal) -> dict:
        """Step 1: create the bulk bonus (moves no money); returns its id. The CSV is written by
        the ``csv`` module from a validated submission id and a Decimal amount, then read back:
        exactly one row, for that submission, of that amount, within ``RL_MAX_BONUS``, is what
        is sent. Its pay call pays what the record Prolific made holds, not what was sent: the
        record's amount (``_setup_amount_problem``) must be the amount sent, else ``PlatformError``
        and that record is never paid."""
        csv_bonuses = bonus_csv(submission_id=submission_id, amount=amount)
        body = self._request("POST", "submissions/bonus-payments/",
                             json={"study_id": prolific_id(study_external_id, what="study id"),
                                   "csv_bonuses": csv_bonuses})
        problem = _setup_amount_problem(body, sent=to_minor_units(money(amount)))
        if problem:
            raise PlatformError(f"Prolific recorded bulk bonus {body.get('id', '?')} {problem}: it is not paid",
                                response={k: body.get(k) for k in ("id", *SETUP_AMOUNT_FIELDS)})
        return {"id": body["id"], "total_amount": body.get("total_amount"), "csv_bonuses": csv_bonuses}

    def bonus_pay(self, *, bulk_id: str) -> dict:
        """Step 2: pay it. Not idempotent on Prolific's side: the caller's audit row guards it."""
        body = self._request("POST", f"bulk-bonus-payments/{bulk_id}/pay/")
        return {"id": bulk_id, **{k: v for k, v in body.items() if isinstance(v, str | int | float)}}

    def bonus(self, *, worker_id: str, platform_assignment_id: str, amount: Decimal, reason: str,
              token: str, study_external_id: str = "") -> dict:
        setup = self.bonus_setup(study_external_id=study_external_id, submission_id=platform_assignment_id,
                                 amount=amount)
        return self.bonus_pay(bulk_id=setup["id"])

    def bonus_was_paid(self, *, worker_id: str, platform_assignment_id: str, amount: Decimal,
                       token: str, sent_at: dt.datetime | None, reason: str = "",
                       accounted: Sequence[str] = ()) -> bool | None:
        """A submission lists the amounts of its bonuses (no reason, no token): this bonus was
        paid where it lists more payments of ``amount`` than the app's other confirmed bonus
        calls of that amount on it (``accounted``) explain. One listed for an earlier bonus of
        the same amount is that bonus, not this one."""
        platform_assignment_id = prolific_id(platform_assignment_id, what="submission id")
        body = self._request("GET", f"submissions/{platform_assignment_id}/")
        cents = to_minor_units(money(amount))
        paid = [int(round(float(value))) for value in (body.get("bonus_payments") or [])]
        if paid.count(cents) > len(accounted):
            return True
        if bonus_call_settling(sent_at):
            return None  # may still be on its way: do not decide yet
        return False

    def block(self, *, worker_id: str, reason: str) -> dict:
        # The public API has no block call; the app marks the participant blocked and refuses them.
        return {"blocked": True, "note": "blocked in the app only"}

    def close(self, *, external_ids: list[dict]) -> dict:
        stopped = []
        for entry in external_ids:
            if entry.get("study_id"):
                self._request("POST", f"studies/{entry['study_id']}/transition/", json={"action": "STOP"})
                stopped.append(entry["study_id"])
        return {"stopped": stopped}


def bonus_call_settling(sent_at: dt.datetime | None) -> bool:
    """Whether a Prolific bonus call (a set-up or a pay call) sent at ``sent_at`` may still be on
    its way: sent less than ``RL_PROLIFIC_BONUS_SETTLE_SECONDS`` ago. Its lost answer is not
    decided as not applied before then (``ProlificPlatform.bonus_was_paid``,
    ``services.platforms.calls.reconcile_call``). False for a call never sent."""
    settle = dt.timedelta(seconds=int(settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS))
    return sent_at is not None and timezone.now() - sent_at < settle


def prolific_id(value: str, *, what: str) -> str:
    """``value`` if it is a Prolific object id (24 hexadecimal characters), else ``PlatformError``:
    nothing else is put into a request's path or body."""
    if not isinstance(value, str) or not PROLIFIC_ID.fullmatch(value):
        raise PlatformError(f"{value!r} is not a Prolific {what} (24 hexadecimal characters); nothing was sent")
    return value


def bonus_csv(*, submission_id: str, amount: Decimal) -> str:
    """The bulk-bonus CSV for one bonus (RFC 4180, written by ``lab.spreadsheet.csv_writer``),
    checked on what it says: one row, this submission, this amount, above zero and within
    ``RL_MAX_BONUS``."""
    submission_id = prolific_id(submission_id, what="submission id")
    amount = Decimal(str(amount))
    if amount != money(amount):
        raise PlatformError(f"bonus amount {amount} has more than two decimals")
    buffer = io.StringIO()
    csv_writer(buffer).writerow([submission_id, f"{money(amount):.2f}"])  # the app's one CSV writer
    text = buffer.getvalue()
    rows = list(csv.reader(io.StringIO(text)))
    sent = sum((Decimal(row[1]) for row in rows if len(row) == 2), Decimal("0"))
    limit = Decimal(str(settings.RL_MAX_BONUS))
    if len(rows) != 1 or rows[0][0] != submission_id or sent != money(amount) or not 0 < sent <= limit:
        raise PlatformError(f"bonus CSV refused: it would pay {sent} over {len(rows)} row(s); one row of at most "
                            f"{limit} (RL_MAX_BONUS) to submission {submission_id} is allowed")
    return text


def _page_parts(body, *, what: str, page: int) -> tuple[list[dict], str | None]:
    """A listing page's ``results`` (a list of objects; absent or null: none) and its next link
    (``_links.next.href``, a string; ``_links``, ``next`` or ``href`` absent, null or empty: the
    last page). Any other shape is a ``PlatformError`` naming the page and the field: the listing
    was not read to its end, never read as ended (``page`` counts from 1)."""
    def bad(field: str, value) -> PlatformError:
        return PlatformError(f"Prolific listed {what} with page {page}'s {field} a {type(value).__name__}, "
                             "not the shape its API gives: the listing was not read to its end")

    if not isinstance(body, dict):
        raise bad("answer", body)
    results = body.get("results")
    if results is None:
        results = []
    if not isinstance(results, list):
        raise bad("results", results)
    for n, item in enumerate(results, start=1):
        if not isinstance(item, dict):
            raise bad(f"result {n}", item)
    links = body.get("_links")
    if links is None:
        return results, None
    if not isinstance(links, dict):
        raise bad("_links", links)
    following = links.get("next")
    if following is None:
        return results, None
    if not isinstance(following, dict):
        raise bad("_links.next", following)
    href = following.get("href")
    if href is None:
        return results, None
    if not isinstance(href, str):
        raise bad("_links.next.href", href)
    return results, href or None


def _listed_id(item: dict, *, what: str) -> str:
    """The ``id`` of an object in a listing: a non-empty string, else a ``PlatformError``."""
    value = item.get("id")
    if not isinstance(value, str) or not value:
        raise PlatformError(f"Prolific listed {what} with an item whose id is {value!r:.60}, not a string: "
                            "the listing was not read to its end")
    return value


def _page_limit(body: dict, *, page_size: int) -> int:
    """How many pages a listing may take, from its first page: the pages its ``meta.count`` needs
    at that page's size, plus ``PAGE_MARGIN`` (items arriving while it is read), never more than
    ``MAX_LISTING_PAGES``; that cap where the count is missing."""
    meta = body.get("meta")
    count = meta.get("count") if isinstance(meta, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 0 or page_size < 1:
        return MAX_LISTING_PAGES
    return min(MAX_LISTING_PAGES, -(-count // page_size) + PAGE_MARGIN)


# The fields of a bonus set-up's answer that state what it records, in the smallest currency unit
# (Prolific's "Set up bonuses": ``amount``, what the participants get, and ``fees`` and ``vat`` on it,
# each a number or null; ``total_amount``, what the balance pays, fees included).
SETUP_AMOUNT_FIELDS = ("amount", "fees", "vat", "total_amount")
# How far a total may be from the amount with its fees and VAT, in the smallest currency unit: each
# may be rounded on its own (a 33.33% fee on 50 is 16.665). A unit mix-up is a factor of 100.
ROUNDING = 1


def _minor(value) -> Decimal | None:
    """An amount of an answer (a number, or a numeric string) as a Decimal; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        return None
    try:
        number = Decimal(str(value))
    except ArithmeticError:  # decimal.InvalidOperation: not a number
        return None
    return number if number.is_finite() else None


def _setup_amount_problem(body: dict, *, sent: int) -> str:
    """Why a bonus set-up's answer ``body`` does not record ``sent`` (smallest currency unit) for the
    participants, "" when it does or cannot say: its ``amount`` where it is a number; else its
    ``total_amount`` less its ``fees`` and ``vat`` where the total and the fees are numbers (a null
    VAT is none), to within ``ROUNDING``. Whatever it states must hold together too: no figure
    below 0, a total no smaller than the amount sent (the balance pays at least what the worker
    gets), and, where the amount, the total and the fees are all given, the total is the amount with
    its fees and VAT (to within ``ROUNDING``). An answer
    stating no amount and no fees cannot be checked beyond that, and the pay call follows as before
    (the CSV sent names the one submission and amount)."""
    figures = {key: _minor(body.get(key)) for key in SETUP_AMOUNT_FIELDS}
    stated = ", ".join(f"{key} {body.get(key)!r}" for key in SETUP_AMOUNT_FIELDS if key in body)
    why = f"as {stated}, not the {sent} (smallest currency unit) sent"
    if any(value is not None and value < 0 for value in figures.values()):
        return why + " (a figure below 0)"
    amount, fees, vat, total = (figures[key] for key in SETUP_AMOUNT_FIELDS)
    if total is not None and total < sent:
        return why + " (a total below the amount)"
    if amount is not None:
        if amount != sent:
            return why
        if total is not None and fees is not None and abs(total - fees - (vat or 0) - amount) > ROUNDING:
            return why + " (its total is not the amount with its fees and VAT)"
        return ""
    if total is None or fees is None:
        return ""
    return "" if abs(total - fees - (vat or 0) - sent) <= ROUNDING else why


def _port(url) -> int | None:
    """``url``'s port (a ``urlsplit`` result), the scheme's default where it names none."""
    return url.port or {"http": 80, "https": 443}.get(url.scheme.lower())


def _parse(value) -> dt.datetime | None:
    if not value:
        return None
    parsed = parse_datetime(value)
    if parsed is not None and timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, dt.UTC)
    return parsed


def _error_text(body) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            detail = error.get("detail") or error.get("title") or error
            return str(detail)[:500]
        return str(error)[:500]
    return str(body)[:500]
