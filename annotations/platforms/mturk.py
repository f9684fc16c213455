"""Amazon Mechanical Turk through boto3 (API 2017-01-17).

Endpoint: the setting ``RL_MTURK_ENDPOINT`` (default: the requester sandbox). Credentials come from boto3's
normal chain (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, a profile, an instance role);
nothing here reads or stores them.

Note: Amazon closed Mechanical Turk for good on 2026-09-30. The integration is complete against the
documented API; Prolific and plain links are the platforms that run today. The one rule for the
closure is here (:func:`mturk_closed_reason`, from the setting ``RL_MTURK_CLOSED_ON``): a new live
publish on MTurk is refused while it holds, the dry run and the study page name it, and a study
already on MTurk is still wound down (its batch resumed, synced, reviewed, paid bonuses, closed).
"""
from __future__ import annotations

import datetime as dt
import logging
import math
import re
from collections.abc import Sequence
from decimal import Decimal
from xml.sax.saxutils import escape

from django.conf import settings
from django.utils import timezone

from studies.models import Platform

from .base import (
    AlreadyDone,
    CostEstimate,
    CrowdPlatform,
    PlatformConfigError,
    PlatformError,
    PlatformTransientError,
    PublishedTask,
    RemoteSubmission,
    TaskSpec,
    bonus_reason_text,
    money,
)

logger = logging.getLogger(__name__)

SANDBOX_ENDPOINT = "https://mturk-requester-sandbox.us-east-1.amazonaws.com"
LIVE_ENDPOINT = "https://mturk-requester.us-east-1.amazonaws.com"
REGION = "us-east-1"

# System qualification types (MTurk requester documentation, "Qualification requirements").
QUAL_LOCALE = "00000000000000000071"
QUAL_PERCENT_APPROVED = "000000000000000000L0"

EXTERNAL_QUESTION_NS = (
    "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2006-07-14/ExternalQuestion.xsd"
)
QUESTION_FORM_NS = "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2017-11-06/QuestionForm.xsd"
ANSWER_KEY_NS = "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2005-10-01/AnswerKey.xsd"

HIT_ID_RE = re.compile(r"\b([A-Z0-9]{20,64})\b")
# MTurk's ids (API 2017-01-17 service model): HITId, AssignmentId and QualificationTypeId are
# ``EntityId`` (``^[A-Z0-9]+$``, 1-64 characters), WorkerId is ``CustomerId`` (``^A[A-Z0-9]+$``,
# 1-64). botocore checks only a string's minimum length, so the patterns are checked here on
# every request (``checked_ids``) and at the worker entry (``annotations.platforms.handoff``):
# a row stored before the entry checked its ids never reaches MTurk.
ENTITY_ID = re.compile(r"[A-Z0-9]{1,64}")
WORKER_ID = re.compile(r"A[A-Z0-9]{1,63}")
ID_PARAMS = {"HITId": ENTITY_ID, "AssignmentId": ENTITY_ID, "QualificationTypeId": ENTITY_ID,
             "WorkerId": WORKER_ID, "WorkerIds": WORKER_ID}
STATUS_MAP = {"Submitted": "submitted", "Approved": "approved", "Rejected": "rejected"}
# A past date: update_expiration_for_hit with it expires the HIT at once.
EXPIRE_NOW = dt.datetime(2015, 1, 1, tzinfo=dt.UTC)


def id_error(name: str, value) -> str | None:
    """Why ``value`` may not be sent as the id parameter ``name`` (None: it may)."""
    pattern = ID_PARAMS[name]
    if isinstance(value, str) and pattern.fullmatch(value):
        return None
    return f"{name} {value!r} is not an MTurk id (^{pattern.pattern}$); nothing was sent"


def checked_ids(operation: str, params: dict) -> dict:
    """``params`` if every id in it has MTurk's format, else ``PlatformError`` naming the first
    that does not (refused before sending: a failure, never an unknown outcome)."""
    for name, value in params.items():
        if name not in ID_PARAMS:
            continue
        for one in (value if name == "WorkerIds" and isinstance(value, list) else [value]):
            error = id_error(name, one)
            if error:
                raise PlatformError(f"MTurk {operation}: {error}")
    return params


def _platform_error(operation: str, exc: Exception) -> Exception:
    """Our error for botocore's ``exc``: a refusal (``PlatformError``; ``AlreadyDone`` for a
    duplicate request), or a ``PlatformTransientError`` when the outcome is unknown."""
    from botocore.exceptions import ClientError, NoCredentialsError, ParamValidationError

    if isinstance(exc, NoCredentialsError):
        return PlatformConfigError(
            "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) "
            "in the environment of the web and worker processes"
        )
    if isinstance(exc, ClientError):
        code, message = _error_parts(exc)
        if code == "RequestError" and _is_duplicate(message):
            return AlreadyDone(message)
        if code in {"ServiceFault", "ThrottlingException", "Throttling"} or (
            exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400) >= 500
        ):
            return PlatformTransientError(f"MTurk {operation}: {message}")
        return PlatformError(f"MTurk {operation}: {message}", response={"code": code, "message": message})
    if isinstance(exc, ParamValidationError):  # refused before anything was sent: not worth retrying
        return PlatformError(f"MTurk {operation}: {exc}")
    return PlatformTransientError(f"MTurk {operation}: {exc}")


CLOSED_ON_SETTING = "RL_MTURK_CLOSED_ON"


def mturk_closed_reason(now: dt.datetime | None = None) -> str:
    """Why MTurk cannot take a new study at ``now`` (default ``timezone.now()``), "" while it can:
    the one rule for Amazon's closure of Mechanical Turk, which every caller reads (``study_publish``
    refuses a new live publish with it, the dry run's plan and the study page warn with it).

    ``RL_MTURK_CLOSED_ON`` (YYYY-MM-DD, UTC; default 2026-09-30, the day Amazon closed it) is the
    first day it is closed; empty, MTurk is treated as open (an operator whose ``RL_MTURK_ENDPOINT``
    still answers). A value that is not such a date counts as closed, and the reason says so, so a
    typo never sends a study to a platform that cannot run it."""
    value = str(settings.RL_MTURK_CLOSED_ON or "").strip()
    if not value:
        return ""
    try:
        closed_on = dt.datetime.strptime(value, "%Y-%m-%d").date()
    except ValueError:
        return (f"the setting {CLOSED_ON_SETTING} is {value[:40]!r}, which is not a date (YYYY-MM-DD): MTurk is "
                f"treated as closed until it is one (empty: open). Run the study on Prolific or with participant "
                "links instead")
    today = (now or timezone.now()).astimezone(dt.UTC).date()
    if today < closed_on:
        return ""
    return (f"Amazon closed Mechanical Turk for good on {closed_on.isoformat()} (the setting {CLOSED_ON_SETTING}), "
            "so no new HITs can be published there: run the study on Prolific or with participant links instead "
            "(a draft changes its platform on the study page; an open study is copied). A study already on MTurk "
            f"can still be synced, reviewed, paid bonuses and closed. An operator whose RL_MTURK_ENDPOINT still "
            f"answers sets {CLOSED_ON_SETTING} empty")


def mturk_closed(now: dt.datetime | None = None) -> bool:
    """Whether MTurk is closed at ``now`` (:func:`mturk_closed_reason`)."""
    return bool(mturk_closed_reason(now))


def mturk_endpoint() -> str:
    return settings.RL_MTURK_ENDPOINT or SANDBOX_ENDPOINT


def large_hit_assignments() -> int:
    return int(settings.RL_MTURK_LARGE_HIT_ASSIGNMENTS)


def fee_rate_for(max_assignments: int) -> Decimal:
    """MTurk's commission on a HIT of ``max_assignments``: ``RL_MTURK_FEE_RATE`` (20%), or
    ``RL_MTURK_LARGE_HIT_FEE_RATE`` (40%) from ``RL_MTURK_LARGE_HIT_ASSIGNMENTS`` (10) up."""
    if max_assignments >= large_hit_assignments():
        return Decimal(str(settings.RL_MTURK_LARGE_HIT_FEE_RATE))
    return Decimal(str(settings.RL_MTURK_FEE_RATE))


def fee_for(amount: Decimal, rate: Decimal) -> Decimal:
    """The fee on one assignment or bonus: at least ``RL_MTURK_MIN_FEE`` (one cent)."""
    return max(Decimal(str(settings.RL_MTURK_MIN_FEE)), money(Decimal(amount) * rate))


def reward_string(amount: Decimal) -> str:
    """MTurk wants "x.yz"."""
    return f"{money(amount):.2f}"


def external_question_xml(url: str, frame_height: int = 0) -> str:
    if not url.startswith("https://"):
        raise PlatformConfigError(
            f"MTurk only frames HTTPS pages, and the worker URL is {url!r}: set RL_PUBLIC_URL to the "
            "public https:// address of this app"
        )
    return (
        f'<ExternalQuestion xmlns="{EXTERNAL_QUESTION_NS}">'
        f"<ExternalURL>{escape(url)}</ExternalURL>"
        f"<FrameHeight>{int(frame_height)}</FrameHeight>"
        "</ExternalQuestion>"
    )


def question_form_xml(*, instructions: str, questions: list[dict]) -> str:
    """A graded multiple-choice test. ``questions``: [{"id", "text", "choices": [{"label", "text"}]}].
    Every text is escaped: question text is untrusted."""
    parts = [f'<QuestionForm xmlns="{QUESTION_FORM_NS}">']
    if instructions:
        parts.append(f"<Overview><Text>{escape(instructions)}</Text></Overview>")
    for question in questions:
        parts.append("<Question>")
        parts.append(f"<QuestionIdentifier>{escape(question['id'])}</QuestionIdentifier>")
        parts.append("<IsRequired>true</IsRequired>")
        parts.append(f"<QuestionContent><Text>{escape(question['text'])}</Text></QuestionContent>")
        parts.append("<AnswerSpecification><SelectionAnswer><StyleSuggestion>radiobutton</StyleSuggestion><Selections>")
        for choice in question["choices"]:
            parts.append(
                f"<Selection><SelectionIdentifier>{escape(str(choice['label']))}</SelectionIdentifier>"
                f"<Text>{escape(str(choice['text']))}</Text></Selection>"
            )
        parts.append("</Selections></SelectionAnswer></AnswerSpecification></Question>")
    parts.append("</QuestionForm>")
    return "".join(parts)


def answer_key_xml(*, questions: list[dict]) -> str:
    """One point per correct answer; MTurk maps the sum to a percentage (0-100)."""
    parts = [f'<AnswerKey xmlns="{ANSWER_KEY_NS}">']
    for question in questions:
        parts.append(
            f"<Question><QuestionIdentifier>{escape(question['id'])}</QuestionIdentifier>"
            f"<AnswerOption><SelectionIdentifier>{escape(str(question['correct']))}</SelectionIdentifier>"
            "<AnswerScore>1</AnswerScore></AnswerOption></Question>"
        )
    parts.append(
        "<QualificationValueMapping><PercentageMapping>"
        f"<MaximumSummedScore>{len(questions)}</MaximumSummedScore>"
        "</PercentageMapping></QualificationValueMapping></AnswerKey>"
    )
    return "".join(parts)


def locale_requirement(countries: list[str]) -> dict:
    return {
        "QualificationTypeId": QUAL_LOCALE,
        "Comparator": "In",
        "LocaleValues": [{"Country": country} for country in countries],
    }


def approval_rate_requirement(min_percent: int) -> dict:
    return {
        "QualificationTypeId": QUAL_PERCENT_APPROVED,
        "Comparator": "GreaterThanOrEqualTo",
        "IntegerValues": [int(min_percent)],
    }


def custom_requirement(qualification_type_id: str, min_score: int) -> dict:
    return {
        "QualificationTypeId": qualification_type_id,
        "Comparator": "GreaterThanOrEqualTo",
        "IntegerValues": [int(min_score)],
        "ActionsGuarded": "DiscoverPreviewAndAccept",
    }


def split_assignments(n_tasks: int, per_hit: int) -> list[int]:
    """Assignments per HIT: HITs of at most ``per_hit`` (9 keeps MTurk's fee at 20%)."""
    per_hit = max(1, per_hit)
    n_hits = math.ceil(n_tasks / per_hit) if n_tasks else 0
    sizes = [per_hit] * n_hits
    if n_hits:
        sizes[-1] = n_tasks - per_hit * (n_hits - 1)
    return sizes


def _error_parts(exc: Exception) -> tuple[str, str]:
    response = getattr(exc, "response", {}) or {}
    error = response.get("Error", {}) or {}
    message = error.get("Message", "") or str(exc)
    turk_code = response.get("TurkErrorCode", "") or error.get("TurkErrorCode", "")
    return error.get("Code", ""), f"{message} {turk_code}".strip()


def _is_duplicate(message: str) -> bool:
    lowered = message.lower()
    return any(
        marker in lowered
        for marker in ("already exists", "already been processed", "hitalreadyexists", "unique request token")
    )


class MTurkPlatform(CrowdPlatform):
    name = Platform.MTURK
    currency = "USD"

    def __init__(self, client=None, endpoint: str | None = None):
        self._client = client
        self._endpoint = endpoint or mturk_endpoint()

    @property
    def endpoint(self) -> str:
        return self._endpoint

    @property
    def is_sandbox(self) -> bool:
        return "sandbox" in self._endpoint

    @property
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            # A fresh session: credentials are resolved from the environment at this point.
            self._client = boto3.session.Session().client(
                Platform.MTURK.value,
                region_name=REGION,
                endpoint_url=self._endpoint,
                config=Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 3, "mode": "standard"}),
            )
        return self._client

    def _pages(self, operation: str, **params):
        """The pages of a list call, ids checked and botocore's errors turned into ours as in
        ``_call`` (a paginator raises them directly; a raw one stopped a whole sync)."""
        from botocore.exceptions import BotoCoreError, ClientError

        checked_ids(operation, params)
        try:
            yield from self.client.get_paginator(operation).paginate(**params)
        except (ClientError, BotoCoreError) as exc:
            raise _platform_error(operation, exc) from exc

    def _call(self, operation: str, **params):
        """Call the API, turning botocore's errors into ours. Duplicates raise AlreadyDone."""
        from botocore.exceptions import BotoCoreError, ClientError

        checked_ids(operation, params)
        try:
            return getattr(self.client, operation)(**params)
        except (ClientError, BotoCoreError) as exc:
            raise _platform_error(operation, exc) from exc

    # -- money and estimates --------------------------------------------------------------
    def estimate_cost(self, *, spec_reward: Decimal, n_tasks: int, max_assignments_per_hit: int = 9) -> CostEstimate:
        reward = money(spec_reward)
        fees = Decimal("0")
        for size in split_assignments(n_tasks, max_assignments_per_hit):
            fees += fee_for(reward, fee_rate_for(size)) * size
        rate = fee_rate_for(max_assignments_per_hit if n_tasks >= max_assignments_per_hit else n_tasks)
        rewards = money(reward * n_tasks)
        small, large = fee_rate_for(1), fee_rate_for(large_hit_assignments())
        notes = [
            f"MTurk fee: {small:.0%} of rewards, {large:.0%} on HITs with {large_hit_assignments()} or more "
            f"assignments (at least ${settings.RL_MTURK_MIN_FEE} each); HITs here hold at most "
            f"{max_assignments_per_hit} assignments.",
            f"Bonuses carry a {small:.0%} fee too.",
        ]
        if self.is_sandbox:
            notes.append("Sandbox endpoint: no real money moves.")
        return CostEstimate(
            platform=self.name, currency=self.currency, n_tasks=n_tasks, reward_per_task=reward, rewards=rewards,
            fee_rate=rate, fees=money(fees), total=money(rewards + fees), notes=notes,
        )

    def balance(self) -> Decimal | None:
        response = self._call("get_account_balance")
        return Decimal(response["AvailableBalance"])

    # -- qualification types ---------------------------------------------------------------
    def create_qualification_type(self, *, name: str, description: str, test_xml: str = "",
                                  answer_key_xml: str = "", test_duration_seconds: int = 1200,
                                  retry_delay_seconds: int | None = None) -> str:
        params: dict = {
            "Name": name,
            "Description": description,
            "QualificationTypeStatus": "Active",
            "Keywords": "qualification, research",
        }
        if test_xml:
            params.update(Test=test_xml, AnswerKey=answer_key_xml, TestDurationInSeconds=test_duration_seconds)
        if retry_delay_seconds is not None:
            params["RetryDelayInSeconds"] = retry_delay_seconds
        try:
            response = self._call("create_qualification_type", **params)
        except (AlreadyDone, PlatformError) as exc:
            if not isinstance(exc, AlreadyDone) and "already" not in str(exc).lower():
                raise
            existing = self.find_qualification_type(name=name)
            if existing is None:
                raise PlatformError(f"MTurk says qualification type {name!r} exists but it was not found") from exc
            return existing
        return response["QualificationType"]["QualificationTypeId"]

    def find_qualification_type(self, *, name: str) -> str | None:
        for page in self._pages("list_qualification_types", Query=name, MustBeRequestable=False,
                                MustBeOwnedByCaller=True):
            for qtype in page.get("QualificationTypes", []):
                if qtype.get("Name") == name:
                    return qtype["QualificationTypeId"]
        return None

    def associate_qualification(self, *, qualification_type_id: str, worker_id: str, value: int) -> dict:
        self._call(
            "associate_qualification_with_worker",
            QualificationTypeId=qualification_type_id, WorkerId=worker_id, IntegerValue=int(value),
            SendNotification=False,
        )
        return {"value": int(value)}  # what is stored of a call names no worker by raw id

    # -- HITs ----------------------------------------------------------------------------
    @staticmethod
    def hit_token(request_token: str, index: int) -> str:
        return f"{request_token}-h{index}"[:64]

    def create_hit_params(self, *, spec: TaskSpec, index: int, max_assignments: int) -> dict:
        token = self.hit_token(spec.request_token, index)
        return {
            "MaxAssignments": max_assignments,
            "AutoApprovalDelayInSeconds": spec.auto_approval_delay_seconds,
            "LifetimeInSeconds": spec.lifetime_seconds,
            "AssignmentDurationInSeconds": spec.assignment_duration_seconds,
            "Reward": reward_string(spec.reward),
            "Title": spec.title[:128],
            "Keywords": spec.keywords,
            "Description": spec.description[:2000],
            "Question": external_question_xml(spec.worker_url),
            "RequesterAnnotation": token,
            "QualificationRequirements": list(spec.qualification_requirements),
            "UniqueRequestToken": token,
        }

    def publish(self, *, spec: TaskSpec, index: int = 0, max_assignments: int = 0) -> PublishedTask:
        params = self.create_hit_params(spec=spec, index=index, max_assignments=max_assignments or spec.n_tasks)
        try:
            response = self._call("create_hit", **params)
        except AlreadyDone as exc:
            # A retry of a create that went through: recover the HIT and carry on.
            hit_id = self._hit_id_from_message(str(exc))
            if hit_id is None:
                found = self.was_published(spec_token=params["UniqueRequestToken"])
                if found is None:
                    raise PlatformError(
                        f"MTurk says the HIT for token {params['UniqueRequestToken']} exists, but it was not "
                        "found in list_hits; check the requester site before publishing again"
                    ) from exc
                hit_id = found.external_id
            logger.info("MTurk HIT for %s already existed: %s", params["UniqueRequestToken"], hit_id)
            return PublishedTask(external_id=hit_id, index=index, max_assignments=params["MaxAssignments"],
                                 recovered=True, response={"recovered_from": str(exc)[:500]})
        hit = response["HIT"]
        return PublishedTask(external_id=hit["HITId"], index=index, max_assignments=hit.get("MaxAssignments", 0),
                             response={"HITId": hit["HITId"], "HITTypeId": hit.get("HITTypeId", ""),
                                       "HITGroupId": hit.get("HITGroupId", "")})

    @staticmethod
    def _hit_id_from_message(message: str) -> str | None:
        for candidate in HIT_ID_RE.findall(message):
            if not candidate.isdigit():  # request ids in the message are all digits
                return candidate
        return None

    def was_published(self, *, spec_token: str) -> PublishedTask | None:
        for page in self._pages("list_hits", PaginationConfig={"PageSize": 100}):
            for hit in page.get("HITs", []):
                if hit.get("RequesterAnnotation") == spec_token:
                    return PublishedTask(external_id=hit["HITId"], max_assignments=hit.get("MaxAssignments", 0),
                                         recovered=True)
        return None

    def get_hit(self, *, hit_id: str) -> dict:
        return self._call("get_hit", HITId=hit_id)["HIT"]

    def add_assignments(self, *, hit_id: str, n: int, token: str) -> dict:
        try:
            self._call("create_additional_assignments_for_hit", HITId=hit_id, NumberOfAdditionalAssignments=n,
                       UniqueRequestToken=token[:64])
        except AlreadyDone as exc:
            return {"hit_id": hit_id, "added": n, "recovered_from": str(exc)[:500]}
        return {"hit_id": hit_id, "added": n}

    def sync(self, *, external_ids: list[dict]) -> list[RemoteSubmission]:
        found: list[RemoteSubmission] = []
        for entry in external_ids:
            hit_id = entry.get("hit_id")
            if not hit_id:
                continue
            pages = self._pages("list_assignments_for_hit", HITId=hit_id,
                                AssignmentStatuses=["Submitted", "Approved", "Rejected"],
                                PaginationConfig={"PageSize": 100})
            for page in pages:
                for item in page.get("Assignments", []):
                    found.append(RemoteSubmission(
                        platform_assignment_id=item["AssignmentId"],
                        platform_task_id=item.get("HITId", hit_id),
                        worker_id=item.get("WorkerId", ""),
                        status=STATUS_MAP.get(item.get("AssignmentStatus", ""), "submitted"),
                        raw_status=item.get("AssignmentStatus", ""),
                        accepted_at=item.get("AcceptTime"),
                        submitted_at=item.get("SubmitTime"),
                    ))
        return found

    # -- reviews and money -----------------------------------------------------------------
    def approve(self, *, platform_assignment_id: str, feedback: str = "") -> dict:
        params = {"AssignmentId": platform_assignment_id}
        if feedback:
            params["RequesterFeedback"] = feedback[:1024]
        self._call("approve_assignment", **params)
        return {"assignment_id": platform_assignment_id, "status": "Approved"}

    def reject(self, *, platform_assignment_id: str, feedback: str, category: str = "") -> dict:
        if not feedback.strip():
            raise PlatformError("MTurk requires feedback text when rejecting: tell the worker why")
        self._call("reject_assignment", AssignmentId=platform_assignment_id, RequesterFeedback=feedback[:1024])
        return {"assignment_id": platform_assignment_id, "status": "Rejected"}

    def assignment_status(self, *, platform_assignment_id: str) -> str | None:
        response = self._call("get_assignment", AssignmentId=platform_assignment_id)
        raw = response.get("Assignment", {}).get("AssignmentStatus", "")
        return STATUS_MAP.get(raw)

    def assignment_id_error(self, platform_assignment_id) -> str | None:
        return id_error("AssignmentId", platform_assignment_id)

    def assignment_owner(self, *, platform_assignment_id: str) -> tuple[str, str] | None:
        found = self._call("get_assignment", AssignmentId=platform_assignment_id).get("Assignment", {})
        return (found.get("HITId") or "", found.get("WorkerId") or "") if found else None

    def bonus(self, *, worker_id: str, platform_assignment_id: str, amount: Decimal, reason: str,
              token: str, study_external_id: str = "") -> dict:
        try:
            self._call(
                "send_bonus", WorkerId=worker_id, BonusAmount=reward_string(amount),
                AssignmentId=platform_assignment_id, Reason=reason[:1024], UniqueRequestToken=token[:64],
            )
        except AlreadyDone as exc:
            return {"amount": reward_string(amount), "recovered_from": str(exc)[:500]}
        return {"amount": reward_string(amount)}

    def bonus_was_paid(self, *, worker_id: str, platform_assignment_id: str, amount: Decimal,
                       token: str, sent_at: dt.datetime | None, reason: str = "",
                       accounted: Sequence[str] = ()) -> bool | None:
        """MTurk lists an assignment's bonuses with worker, amount and the Reason sent (not the
        UniqueRequestToken). Paid: more payments of ``amount`` to ``worker_id`` with this
        ``reason`` than the app's other confirmed calls that sent the same reason
        (``accounted``); where MTurk returns no reasons, more payments of ``amount`` than those
        calls. One paid for an earlier bonus of the same amount is that bonus, not this one."""
        same = [payment
                for page in self._pages("list_bonus_payments", AssignmentId=platform_assignment_id)
                for payment in page.get("BonusPayments", [])
                if payment.get("WorkerId") == worker_id
                and money(payment.get("BonusAmount", "0")) == money(amount)]
        wanted = bonus_reason_text(reason)
        if wanted and any(bonus_reason_text(payment.get("Reason")) for payment in same):
            shown = sum(1 for payment in same if bonus_reason_text(payment.get("Reason")) == wanted)
            return shown > sum(1 for other in accounted if bonus_reason_text(other) == wanted)
        return len(same) > len(accounted)

    def block(self, *, worker_id: str, reason: str) -> dict:
        self._call("create_worker_block", WorkerId=worker_id, Reason=reason[:1024] or "Blocked by the requester")
        return {"blocked": True}

    def notify(self, *, worker_ids: list[str], subject: str, message: str) -> dict:
        # A worker id MTurk would refuse is a failure of its own; the others are notified.
        failures = [{"WorkerId": worker_id, "NotifyWorkersFailureCode": "HardFailure",
                     "NotifyWorkersFailureMessage": id_error("WorkerId", worker_id)}
                    for worker_id in worker_ids if id_error("WorkerId", worker_id)]
        bad = {failure["WorkerId"] for failure in failures}
        sent = [worker_id for worker_id in worker_ids if worker_id not in bad]
        for start in range(0, len(sent), 100):  # the API takes up to 100 workers a call
            response = self._call("notify_workers", Subject=subject[:200], MessageText=message[:4096],
                                  WorkerIds=sent[start:start + 100])
            failures.extend(response.get("NotifyWorkersFailureStatuses", []))
        return {"notified": len(worker_ids) - len(failures), "failures": failures}

    def close(self, *, external_ids: list[dict]) -> dict:
        expired = []
        for entry in external_ids:
            if entry.get("hit_id"):
                self._call("update_expiration_for_hit", HITId=entry["hit_id"], ExpireAt=EXPIRE_NOW)
                expired.append(entry["hit_id"])
        return {"expired": expired}
