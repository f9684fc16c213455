"""Crowd-platform services: publish a study, sync it, review and pay, block, close, and the pay
figures a researcher needs before and after publishing.

Every call that changes state on a platform goes through ``payments.platform_call_execute``
(audit row committed as ``sent`` before the request, platform idempotency token, confirmation
after). Services here therefore do not wrap platform calls in ``transaction.atomic``; the local
writes around them are atomic on their own.
"""
from __future__ import annotations

import hashlib
import logging
import math
import statistics
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max, Sum
from django.urls import NoReverseMatch
from django.utils import timezone

from annotations.models import (
    Annotation,
    Assignment,
    Bonus,
    MTurkQualificationType,
    Participant,
    PlatformCall,
    PlatformSubmission,
    Publication,
    QualificationGrant,
    Unit,
)
from annotations.platforms import get_platform
from annotations.platforms.base import (
    CostEstimate,
    CrowdPlatform,
    PlatformError,
    TaskSpec,
    money,
)
from annotations.platforms.mturk import (
    MTurkPlatform,
    answer_key_xml,
    approval_rate_requirement,
    custom_requirement,
    external_question_xml,
    locale_requirement,
    question_form_xml,
    split_assignments,
)
from annotations.platforms.prolific import MIN_REJECTION_MESSAGE, REJECTION_CATEGORIES
from annotations.services.links import links_close, links_generate, open_link_create
from annotations.services.payments import CallSpec, PlatformServiceError, platform_call_execute
from studies.models import Item, Platform, Study

logger = logging.getLogger(__name__)

OP = PlatformCall.Operation
DONE_STATUSES = (Assignment.Status.SUBMITTED, Assignment.Status.APPROVED, Assignment.Status.REJECTED)
MAX_BONUS = Decimal("100.00")


def _setting(name: str, default):
    return getattr(settings, name, default)


def _user(user):
    return user if getattr(user, "pk", None) else None


# --- what a study needs ------------------------------------------------------------------------

def study_task_count(*, study: Study) -> tuple[int, int]:
    """(answers to collect, tasks) for ``study``: from its units when they exist, else from its
    items x sources x annotators per unit."""
    n_answers = Unit.objects.filter(study=study).aggregate(total=Sum("quota"))["total"] or 0
    if not n_answers:
        n_items = study.items.count()
        if not n_items:
            n_items = Item.objects.filter(dataset_id=study.dataset_id, split=study.split).count()
            if study.item_sample_size:
                n_items = min(n_items, study.item_sample_size)
        n_sources = max(1, study.sources.count())
        n_answers = n_items * n_sources * study.annotators_per_unit
    n_tasks = math.ceil(n_answers / study.units_per_task) if n_answers else 0
    return n_answers, n_tasks


def study_worker_url(*, study: Study, platform: str) -> str:
    """The URL a platform sends workers to (the questionnaire's entry view)."""
    try:
        from annotations.platforms.handoff import study_entry_url

        return study_entry_url(study, platform=platform)
    except (ImportError, NoReverseMatch):
        base = f"{settings.RL_PUBLIC_URL}/w/{platform}/{study.pk}/"
        if platform == "prolific":
            base += "?PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"
        return base


def _install_tag() -> str:
    return hashlib.sha256(settings.SECRET_KEY.encode()).hexdigest()[:6]


def publication_request_token(*, study: Study, platform: str, batch: int) -> str:
    """Deterministic per study, platform and batch (and per installation, so two deployments on
    one MTurk account never share a token)."""
    return f"rl{_install_tag()}-{platform[:2]}-s{study.pk}-b{batch}"


def _platform_name(study: Study, platform_name: str | None) -> str:
    name = platform_name or study.platform
    if name not in {"link", "prolific", "mturk"}:
        raise PlatformServiceError(f"platform {name!r} is not one of link, prolific, mturk")
    return name


# --- cost and pay ------------------------------------------------------------------------------

def study_cost_estimate(*, study: Study, platform_name: str | None = None,
                        max_assignments_per_hit: int | None = None) -> CostEstimate:
    name = _platform_name(study, platform_name)
    platform = get_platform(name)
    _, n_tasks = study_task_count(study=study)
    per_hit = max_assignments_per_hit or _setting("RL_MTURK_MAX_ASSIGNMENTS_PER_HIT", 9)
    return platform.estimate_cost(spec_reward=study.reward, n_tasks=n_tasks, max_assignments_per_hit=per_hit)


@dataclass
class HourlyPay:
    reward: Decimal
    floor: Decimal
    estimate_minutes: Decimal
    estimate_hourly: Decimal
    n_recorded: int = 0
    median_minutes: float | None = None
    p25_minutes: float | None = None
    p75_minutes: float | None = None
    min_minutes: float | None = None
    max_minutes: float | None = None
    active_median_minutes: float | None = None
    hourly_median: Decimal | None = None
    hourly_p75: Decimal | None = None
    below_floor: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def basis(self) -> str:
        return "recorded" if self.n_recorded else "estimate"

    def as_dict(self) -> dict[str, Any]:
        out = {}
        for key, value in self.__dict__.items():
            out[key] = str(value) if isinstance(value, Decimal) else value
        out["basis"] = self.basis
        return out


def _hourly(reward: Decimal, minutes: float) -> Decimal:
    if minutes <= 0:
        return Decimal("0")
    return money(reward * Decimal(60) / Decimal(str(minutes)))


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def study_effective_hourly_pay(*, study: Study) -> HourlyPay:
    """Effective hourly pay from recorded task times (assignment start to submission; the sum of
    the answer durations as "active" time where recorded), with the median and spread, against
    the study's floor. Before any task is done, the estimate from ``estimated_minutes_per_task``."""
    reward = money(study.reward)
    floor = money(study.hourly_pay_floor)
    estimate_minutes = Decimal(study.estimated_minutes_per_task)
    result = HourlyPay(reward=reward, floor=floor, estimate_minutes=estimate_minutes,
                       estimate_hourly=_hourly(reward, float(estimate_minutes)))
    rows = Assignment.objects.filter(study=study, status__in=DONE_STATUSES, submitted_at__isnull=False).values_list(
        "id", "created_at", "submitted_at"
    )
    minutes = [max(0.0, (submitted - created).total_seconds() / 60) for _, created, submitted in rows]
    if minutes:
        result.n_recorded = len(minutes)
        result.median_minutes = round(statistics.median(minutes), 2)
        result.p25_minutes = round(_quantile(minutes, 0.25), 2)
        result.p75_minutes = round(_quantile(minutes, 0.75), 2)
        result.min_minutes = round(min(minutes), 2)
        result.max_minutes = round(max(minutes), 2)
        result.hourly_median = _hourly(reward, result.median_minutes)
        result.hourly_p75 = _hourly(reward, result.p75_minutes)
        active = (
            Annotation.objects.filter(claim__assignment__in=[row[0] for row in rows], duration_ms__isnull=False)
            .values("claim__assignment")
            .annotate(total=Sum("duration_ms"))
            .values_list("total", flat=True)
        )
        active_minutes = [total / 60000 for total in active if total]
        if active_minutes:
            result.active_median_minutes = round(statistics.median(active_minutes), 2)
        pay = result.hourly_median
        if pay < floor:
            result.below_floor = True
            result.warnings.append(
                f"Median recorded time {result.median_minutes} min gives {pay}/hour, below the floor of "
                f"{floor}/hour: raise the reward to at least {money(floor * Decimal(str(result.median_minutes)) / 60)} "
                "or pay the difference as a bonus."
            )
        elif result.hourly_p75 is not None and result.hourly_p75 < floor:
            result.warnings.append(
                f"A quarter of workers took {result.p75_minutes} min or more, which pays {result.hourly_p75}/hour, "
                f"below the floor of {floor}/hour."
            )
    elif result.estimate_hourly < floor:
        result.below_floor = True
        result.warnings.append(
            f"At the estimated {estimate_minutes} min a task, {reward} pays {result.estimate_hourly}/hour, below "
            f"the floor of {floor}/hour: raise the reward to at least "
            f"{money(floor * estimate_minutes / 60)}."
        )
    return result


# --- publishing --------------------------------------------------------------------------------

def _task_spec(*, study: Study, platform: str, request_token: str, n_tasks: int, completion_code: str,
               options: dict) -> TaskSpec:
    minutes = max(1, math.ceil(float(study.estimated_minutes_per_task)))
    description = (options.get("description") or study.instructions or "").strip()
    if not description:
        description = (
            "Answer short questions, read a model's explanation, and answer again. "
            f"About {minutes} minutes."
        )
    return TaskSpec(
        title=options.get("title") or study.name,
        description=description[:2000],
        reward=money(study.reward),
        n_tasks=n_tasks,
        estimated_minutes=minutes,
        request_token=request_token,
        worker_url=study_worker_url(study=study, platform=platform),
        lifetime_seconds=int(options.get("lifetime_seconds", 7 * 24 * 3600)),
        assignment_duration_seconds=int(options.get("assignment_duration_seconds", max(1800, minutes * 60 * 3))),
        auto_approval_delay_seconds=int(options.get("auto_approval_delay_seconds", 3 * 24 * 3600)),
        max_assignments_per_hit=int(options.get("max_assignments_per_hit",
                                                _setting("RL_MTURK_MAX_ASSIGNMENTS_PER_HIT", 9))),
        completion_code=completion_code,
    )


def _mturk_requirements(*, study: Study, options: dict, qualification: MTurkQualificationType | None) -> list[dict]:
    countries = options.get("locales", _setting("RL_MTURK_LOCALES", ["US"]))
    min_approval = int(options.get("min_approval_rate", _setting("RL_MTURK_MIN_APPROVAL_RATE", 98)))
    requirements = []
    if countries:
        requirements.append(locale_requirement(list(countries)))
    if min_approval:
        requirements.append(approval_rate_requirement(min_approval))
    if qualification is not None:
        requirements.append(custom_requirement(qualification.qualification_type_id, qualification.min_score))
    return requirements


def _qualification_test_questions(study: Study) -> tuple[str, list[dict], int] | None:
    test = getattr(study, "qualification_test", None)
    if test is None:
        return None
    questions = [
        {"id": f"q{q.pk}", "text": q.question, "choices": q.choices, "correct": q.correct_answer}
        for q in test.questions.all()
    ]
    if not questions:
        return None
    min_score = math.ceil(100 * test.pass_mark / len(questions))
    return test.instructions, questions, min(100, min_score)


def mturk_qualification_ensure(*, study: Study, user=None, kind: str = MTurkQualificationType.Kind.GRADED_TEST,
                               platform: MTurkPlatform | None = None) -> MTurkQualificationType | None:
    """The study's MTurk qualification type, created once per endpoint. A graded test needs the
    study's qualification test (questions with correct answers); ``app_granted`` makes a type the
    app grants with ``mturk_qualification_grant_passed``."""
    platform = platform or get_platform("mturk")
    existing = MTurkQualificationType.objects.filter(study=study, kind=kind, endpoint=platform.endpoint).first()
    if existing is not None:
        return existing
    name = f"{study.name[:80]} qualification ({_install_tag()}-s{study.pk}-{kind})"
    if kind == MTurkQualificationType.Kind.GRADED_TEST:
        test = _qualification_test_questions(study)
        if test is None:
            return None
        instructions, questions, min_score = test
        params = {"test_xml": question_form_xml(instructions=instructions, questions=questions),
                  "answer_key_xml": answer_key_xml(questions=questions)}
    else:
        min_score, params = 1, {}
    call = platform_call_execute(
        spec=CallSpec(platform="mturk", operation=OP.CREATE_QUALIFICATION,
                      idempotency_key=f"mturk:qualtype:{platform.endpoint}:{study.pk}:{kind}",
                      request_summary={"name": name, "kind": kind, "min_score": min_score},
                      user=_user(user), study=study),
        send=lambda: {"QualificationTypeId": platform.create_qualification_type(
            name=name, description=f"Qualification for the study {study.name[:150]}", **params)},
        reconcile=lambda call: reconcile_call(platform=platform, call=call),
    )
    qualification, _ = MTurkQualificationType.objects.get_or_create(
        study=study, kind=kind, endpoint=platform.endpoint,
        defaults={"qualification_type_id": call.response["QualificationTypeId"], "name": name, "min_score": min_score},
    )
    return qualification


def mturk_qualification_grant_passed(*, study: Study, user=None, platform: MTurkPlatform | None = None) -> int:
    """Grant the study's app-granted MTurk qualification to every MTurk worker who passed the
    app's qualification test. Each worker is granted once (audited); returns how many calls."""
    platform = platform or get_platform("mturk")
    qualification = mturk_qualification_ensure(study=study, user=user, kind=MTurkQualificationType.Kind.APP_GRANTED,
                                               platform=platform)
    granted = 0
    grants = QualificationGrant.objects.filter(study=study, passed=True,
                                               participant__platform=Platform.MTURK)
    for grant in grants.select_related("participant"):
        worker_id = grant.participant.external_id
        platform_call_execute(
            spec=CallSpec(platform="mturk", operation=OP.ASSOCIATE_QUALIFICATION,
                          idempotency_key=f"mturk:qualgrant:{qualification.qualification_type_id}:{worker_id}",
                          request_summary={"worker_id": worker_id, "value": 100}, user=_user(user), study=study),
            send=lambda worker_id=worker_id: platform.associate_qualification(
                qualification_type_id=qualification.qualification_type_id, worker_id=worker_id, value=100),
            reconcile=lambda call: False,  # granting again is harmless
        )
        granted += 1
    return granted


def _mturk_plan(*, spec: TaskSpec, platform: MTurkPlatform, strict: bool) -> list[dict]:
    plan = []
    for index, size in enumerate(split_assignments(spec.n_tasks, spec.max_assignments_per_hit)):
        if strict:
            params = platform.create_hit_params(spec=spec, index=index, max_assignments=size)
        else:
            try:
                params = platform.create_hit_params(spec=spec, index=index, max_assignments=size)
            except PlatformError:
                saved = spec.worker_url
                spec.worker_url = "https://" + saved.split("://", 1)[-1]
                params = platform.create_hit_params(spec=spec, index=index, max_assignments=size)
                spec.worker_url = saved
        plan.append({"operation": "create_hit", "params": params})
    return plan


def _next_batch(study: Study, platform: str, dry_run: bool) -> int:
    latest = Publication.objects.filter(study=study, platform=platform, dry_run=dry_run).aggregate(m=Max("batch"))["m"]
    return (latest or 0) + 1


def study_publish(*, study: Study, user=None, dry_run: bool = False, platform_name: str | None = None,
                  n_tasks: int | None = None, options: dict | None = None) -> Publication:
    """Publish ``study`` on its platform (or ``platform_name``).

    Idempotent: while a publication of this study on this platform is published or still
    publishing, calling again resumes or returns it, with the same request tokens, so no second
    HIT / Prolific study / link set is made. A dry run builds and logs everything that would be
    sent, stores it on a dry-run publication, and sends nothing.

    ``options``: title, description, max_assignments_per_hit, locales, min_approval_rate,
    lifetime_seconds, assignment_duration_seconds, auto_approval_delay_seconds, link_mode
    ("single" or "open"), require_qualification (default True when the study has a test)."""
    options = dict(options or {})
    name = _platform_name(study, platform_name)
    platform = get_platform(name)
    _, default_tasks = study_task_count(study=study)
    n_tasks = int(n_tasks if n_tasks is not None else default_tasks)
    if n_tasks < 1:
        raise PlatformServiceError(
            f"study {study.name!r} has nothing to publish: add items (and sources) or build its units first"
        )
    if platform.moves_money and study.reward <= 0:
        raise PlatformServiceError(f"study {study.name!r} has no reward: set a reward per task before publishing")
    estimate = platform.estimate_cost(spec_reward=study.reward, n_tasks=n_tasks,
                                      max_assignments_per_hit=int(options.get(
                                          "max_assignments_per_hit", _setting("RL_MTURK_MAX_ASSIGNMENTS_PER_HIT", 9))))
    if dry_run:
        return _publish_dry_run(study=study, user=user, name=name, platform=platform, n_tasks=n_tasks,
                                estimate=estimate, options=options)

    with transaction.atomic():
        Study.objects.select_for_update().filter(pk=study.pk).first()
        publication = (
            Publication.objects.select_for_update()
            .filter(study=study, platform=name, dry_run=False,
                    status__in=[Publication.Status.PUBLISHING, Publication.Status.PUBLISHED])
            .order_by("-batch").first()
        )
        if publication is not None and publication.status == Publication.Status.PUBLISHED:
            return publication
        if publication is None:
            # A batch that failed before anything was sent (no credentials, low balance) is
            # reused, so failed attempts do not pile up batch numbers.
            latest = (Publication.objects.select_for_update()
                      .filter(study=study, platform=name, dry_run=False).order_by("-batch").first())
            if (latest is not None and latest.status == Publication.Status.FAILED and not latest.external_ids
                    and not latest.calls.exclude(status=PlatformCall.Status.FAILED).exists()):
                latest.status = Publication.Status.PUBLISHING
                latest.n_tasks, latest.reward, latest.currency = n_tasks, money(study.reward), estimate.currency
                latest.estimated_cost, latest.endpoint = estimate.total, platform.endpoint
                latest.plan = {"options": options, "estimate": estimate.as_dict()}
                latest.save()
                publication = latest
        if publication is None:
            batch = _next_batch(study, name, dry_run=False)
            publication = Publication.objects.create(
                study=study, platform=name, batch=batch, dry_run=False,
                request_token=publication_request_token(study=study, platform=name, batch=batch),
                endpoint=platform.endpoint, n_tasks=n_tasks, reward=money(study.reward),
                currency=estimate.currency, estimated_cost=estimate.total, created_by=_user(user),
                plan={"options": options, "estimate": estimate.as_dict()},
            )
    try:
        if name == "mturk":
            _publish_mturk(publication=publication, study=study, user=user, platform=platform,
                           estimate=estimate, options=options)
        elif name == "prolific":
            _publish_prolific(publication=publication, study=study, user=user, platform=platform, options=options)
        else:
            _publish_links(publication=publication, study=study, user=user, options=options)
    except PlatformError as exc:
        _publication_error(publication, exc.message)
        raise PlatformServiceError(f"publishing {study.name!r} on {name} failed: {exc.message}") from exc
    except PlatformServiceError as exc:
        _publication_error(publication, exc.message)
        raise
    with transaction.atomic():
        publication = Publication.objects.select_for_update().get(pk=publication.pk)
        publication.status = Publication.Status.PUBLISHED
        publication.error = ""
        publication.save(update_fields=["status", "error", "updated_at"])
        if study.status != Study.Status.OPEN:
            Study.objects.filter(pk=study.pk).update(status=Study.Status.OPEN)
            study.status = Study.Status.OPEN
    logger.info("published %s on %s (batch %s): %s", study, name, publication.batch, publication.external_ids)
    return publication


def _publication_error(publication: Publication, message: str) -> None:
    """Nothing created yet: the publication failed (a later publish starts a new batch). Something
    created: it stays "publishing" so the next publish resumes with the same tokens."""
    with transaction.atomic():
        locked = Publication.objects.select_for_update().get(pk=publication.pk)
        started = locked.external_ids or locked.calls.exclude(status=PlatformCall.Status.FAILED).exists()
        locked.error = message[:2000]
        if not started:
            locked.status = Publication.Status.FAILED
        locked.save(update_fields=["error", "status", "updated_at"])


def _publish_dry_run(*, study, user, name, platform, n_tasks, estimate, options) -> Publication:
    batch = _next_batch(study, name, dry_run=False)
    token = publication_request_token(study=study, platform=name, batch=batch)
    completion_code = Publication._meta.get_field("completion_code").default()
    spec = _task_spec(study=study, platform=name, request_token=token, n_tasks=n_tasks,
                      completion_code=completion_code, options=options)
    warnings: list[str] = []
    requests: list[dict] = []
    if name == "mturk":
        if not spec.worker_url.startswith("https://"):
            warnings.append(f"RL_PUBLIC_URL is not https ({settings.RL_PUBLIC_URL}); MTurk would refuse the HIT.")
        test = _qualification_test_questions(study)
        qualification = None
        if test is not None and options.get("require_qualification", True):
            instructions, questions, min_score = test
            requests.append({"operation": "create_qualification_type", "params": {
                "Test": question_form_xml(instructions=instructions, questions=questions),
                "AnswerKey": answer_key_xml(questions=questions), "min_score": min_score}})
            qualification = MTurkQualificationType(qualification_type_id="<created on publish>", min_score=min_score)
        spec.qualification_requirements = _mturk_requirements(study=study, options=options, qualification=qualification)
        requests.append({"operation": "get_account_balance", "params": {}})
        requests.extend(_mturk_plan(spec=spec, platform=platform, strict=False))
    elif name == "prolific":
        requests.append({"operation": "POST studies/", "json": platform.study_payload(spec=spec)})
        requests.append({"operation": "POST studies/<id>/transition/", "json": {"action": "PUBLISH"}})
    else:
        mode = options.get("link_mode", "single")
        requests.append({"operation": "make_links", "mode": mode, "count": n_tasks if mode == "single" else 1})
    hourly = study_effective_hourly_pay(study=study)
    warnings.extend(hourly.warnings)
    plan = {"requests": requests, "estimate": estimate.as_dict(), "warnings": warnings,
            "hourly_pay": hourly.as_dict(), "endpoint": platform.endpoint, "options": options}
    with transaction.atomic():
        publication, _ = Publication.objects.update_or_create(
            study=study, platform=name, batch=batch, dry_run=True,
            defaults={"request_token": token, "status": Publication.Status.DRY_RUN, "endpoint": platform.endpoint,
                      "n_tasks": n_tasks, "reward": money(study.reward), "currency": estimate.currency,
                      "estimated_cost": estimate.total, "plan": plan, "created_by": _user(user)},
        )
    logger.info("DRY RUN publish %s on %s: %d request(s) not sent; estimate %s %s", study, name, len(requests),
                estimate.total, estimate.currency)
    return publication


def _add_external_id(publication: Publication, entry: dict, key: str) -> Publication:
    with transaction.atomic():
        locked = Publication.objects.select_for_update().get(pk=publication.pk)
        entries = [e for e in locked.external_ids if e.get(key) != entry[key] and e.get("index") != entry.get("index")]
        entries.append(entry)
        locked.external_ids = sorted(entries, key=lambda e: e.get("index", 0))
        locked.save(update_fields=["external_ids", "updated_at"])
    publication.external_ids = locked.external_ids
    return locked


def _publish_mturk(*, publication, study, user, platform: MTurkPlatform, estimate: CostEstimate, options) -> None:
    external_question_xml(study_worker_url(study=study, platform="mturk"))  # HTTPS, before anything is sent
    qualification = None
    if options.get("require_qualification", True):
        qualification = mturk_qualification_ensure(study=study, user=user, platform=platform)
    spec = _task_spec(study=study, platform="mturk", request_token=publication.request_token,
                      n_tasks=publication.n_tasks, completion_code=publication.completion_code, options=options)
    spec.qualification_requirements = _mturk_requirements(study=study, options=options, qualification=qualification)
    sizes = split_assignments(spec.n_tasks, spec.max_assignments_per_hit)
    done = {entry["index"] for entry in publication.external_ids if entry.get("hit_id")}
    pending = [(index, size) for index, size in enumerate(sizes) if index not in done]
    if not pending:
        return
    remaining = sum(size for _, size in pending)
    cost = platform.estimate_cost(spec_reward=spec.reward, n_tasks=remaining,
                                  max_assignments_per_hit=spec.max_assignments_per_hit)
    available = platform.balance()
    if available is not None and available < cost.total:
        raise PlatformServiceError(
            f"MTurk balance {available} USD is below the cost of the HITs still to create ({cost.total} USD, fees "
            "included): add funds to the requester account, then publish again"
        )
    for index, size in pending:
        token = platform.hit_token(spec.request_token, index)
        fee = platform.estimate_cost(spec_reward=spec.reward, n_tasks=size, max_assignments_per_hit=size).total
        call = platform_call_execute(
            spec=CallSpec(platform="mturk", operation=OP.CREATE_HIT, idempotency_key=f"mturk:create_hit:{token}",
                          platform_token=token, amount=fee, currency="USD",
                          request_summary={"index": index, "max_assignments": size, "reward": str(spec.reward),
                                           "endpoint": platform.endpoint, "title": spec.title[:128]},
                          user=_user(user), study=study, publication=publication),
            send=lambda index=index, size=size: _hit_response(platform.publish(spec=spec, index=index,
                                                                               max_assignments=size)),
            reconcile=lambda call: reconcile_call(platform=platform, call=call),
        )
        hit_id = call.response.get("HITId")
        if not hit_id:
            found = platform.was_published(spec_token=token)
            if found is None:
                raise PlatformServiceError(f"HIT {index} of {study.name!r} was confirmed but its id is unknown")
            hit_id = found.external_id
        _add_external_id(publication, {"index": index, "hit_id": hit_id, "max_assignments": size}, "hit_id")


def _hit_response(task) -> dict:
    return {"HITId": task.external_id, "recovered": task.recovered, "max_assignments": task.max_assignments,
            **task.response}


def _publish_prolific(*, publication, study, user, platform, options) -> None:
    spec = _task_spec(study=study, platform="prolific", request_token=publication.request_token,
                      n_tasks=publication.n_tasks, completion_code=publication.completion_code, options=options)
    with transaction.atomic():
        locked = Publication.objects.select_for_update().get(pk=publication.pk)
        locked.plan = {**(locked.plan or {}), "completion_code": publication.completion_code}
        locked.save(update_fields=["plan", "updated_at"])
    create = platform_call_execute(
        spec=CallSpec(platform="prolific", operation=OP.CREATE_STUDY,
                      idempotency_key=f"prolific:create_study:{publication.request_token}",
                      request_summary={k: v for k, v in platform.study_payload(spec=spec).items() if k != "description"},
                      user=_user(user), study=study, publication=publication),
        send=lambda: {"id": platform.create_study(spec=spec).external_id},
        reconcile=lambda call: reconcile_call(platform=platform, call=call),
    )
    prolific_id = create.response["id"]
    _add_external_id(publication, {"index": 0, "study_id": prolific_id}, "study_id")
    estimate = platform.estimate_cost(spec_reward=spec.reward, n_tasks=spec.n_tasks)
    platform_call_execute(
        spec=CallSpec(platform="prolific", operation=OP.PUBLISH_STUDY,
                      idempotency_key=f"prolific:publish_study:{publication.request_token}",
                      amount=estimate.total, currency=estimate.currency,
                      request_summary={"study_id": prolific_id, "action": "PUBLISH", "places": spec.n_tasks,
                                       "reward_minor_units": int(spec.reward * 100)},
                      user=_user(user), study=study, publication=publication),
        send=lambda: platform.publish_study(study_id=prolific_id),
        reconcile=lambda call: reconcile_call(platform=platform, call=call),
    )


def _publish_links(*, publication, study, user, options) -> None:
    mode = options.get("link_mode", "single")
    if publication.participant_links.exists() or publication.open_links.exists():
        return
    if mode == "open":
        open_link_create(study=study, user=user, publication=publication,
                         completion_code=publication.completion_code,
                         max_participants=options.get("max_participants") or publication.n_tasks)
    else:
        links_generate(study=study, n=publication.n_tasks, user=user, publication=publication)


def study_prolific_completion_code(*, study: Study) -> str:
    publication = (Publication.objects.filter(study=study, platform="prolific", dry_run=False)
                   .order_by("-batch").first())
    return publication.completion_code if publication else ""


# --- sync and reconciliation -------------------------------------------------------------------

def reconcile_call(*, platform: CrowdPlatform, call: PlatformCall) -> bool | dict | None:
    """Ask the platform whether an unconfirmed call was applied (see payments.platform_call_reconcile)."""
    summary = call.request_summary or {}
    op = call.operation
    if op == OP.CREATE_HIT:
        found = platform.was_published(spec_token=call.platform_token)
        return {"HITId": found.external_id} if found else False
    if op == OP.CREATE_STUDY:
        found = platform.was_published(spec_token=call.idempotency_key.rsplit(":", 1)[-1])
        return {"id": found.external_id} if found else False
    if op == OP.PUBLISH_STUDY:
        return platform.get_study(study_id=summary["study_id"]).get("status", "UNPUBLISHED") != "UNPUBLISHED"
    if op in (OP.APPROVE, OP.REJECT):
        status = platform.assignment_status(platform_assignment_id=summary["platform_assignment_id"])
        wanted = "approved" if op == OP.APPROVE else "rejected"
        if status == wanted:
            return True
        return False if status == "submitted" else None
    if op == OP.BONUS:
        return platform.bonus_was_paid(worker_id=summary.get("worker_id", ""),
                                       platform_assignment_id=summary["platform_assignment_id"],
                                       amount=call.amount, token=call.platform_token, sent_at=call.sent_at)
    if op == OP.ADD_ASSIGNMENTS:
        hit = platform.get_hit(hit_id=summary["hit_id"])
        return hit.get("MaxAssignments", 0) >= summary["target_max_assignments"]
    if op == OP.CREATE_QUALIFICATION:
        qid = platform.find_qualification_type(name=summary["name"])
        return {"QualificationTypeId": qid} if qid else False
    # Setting up a Prolific bonus, blocking, notifying, granting, expiring, stopping: doing it
    # again is harmless, so an unknown outcome is treated as "not applied".
    return False


def platform_calls_reconcile(*, study: Study) -> dict:
    """Reconcile every call of ``study`` that was sent but never recorded (a crash, a timeout)."""
    from annotations.services.payments import platform_call_reconcile

    counts = {"confirmed": 0, "failed": 0, "unknown": 0}
    for call in PlatformCall.objects.filter(study=study, status=PlatformCall.Status.SENT).order_by("id"):
        platform = get_platform(call.platform)
        outcome = platform_call_reconcile(call=call, reconcile=lambda c, p=platform: reconcile_call(platform=p, call=c))
        key = {True: "confirmed", False: "failed", None: "unknown"}[outcome]
        counts[key] += 1
        if outcome is True and call.operation == OP.BONUS:
            token = call.idempotency_key.split(":", 2)[-1]
            Bonus.objects.filter(token=token).exclude(status=Bonus.Status.PAID).update(
                status=Bonus.Status.PAID, paid_at=timezone.now(), platform_call=call)
        if outcome is True and call.operation in (OP.APPROVE, OP.REJECT) and call.assignment_id:
            _assignment_reviewed(call.assignment_id, approved=call.operation == OP.APPROVE)
        if outcome is True and call.operation == OP.CREATE_HIT and call.publication_id:
            call.refresh_from_db()
            summary = call.request_summary or {}
            _add_external_id(call.publication, {"index": summary.get("index", 0), "hit_id": call.response["HITId"],
                                                "max_assignments": summary.get("max_assignments", 0)}, "hit_id")
    return counts


def _assignment_reviewed(assignment_id: int, *, approved: bool) -> None:
    status = Assignment.Status.APPROVED if approved else Assignment.Status.REJECTED
    Assignment.objects.filter(pk=assignment_id).exclude(status=status).update(status=status,
                                                                             reviewed_at=timezone.now())


@dataclass
class SyncReport:
    remote: int = 0
    matched: int = 0
    flagged: int = 0
    status_updates: int = 0
    reconciled: dict = field(default_factory=dict)
    flags: list[dict] = field(default_factory=list)


def study_sync(*, study: Study) -> SyncReport:
    """Fetch every assignment / submission of the study's publications, match them to the stored
    assignments (by the platform's assignment / submission id), flag submitted ones that have no
    stored assignment or no stored answers, take over review outcomes decided on the platform
    (MTurk auto-approval), and reconcile calls left unconfirmed by a crash."""
    report = SyncReport(reconciled=platform_calls_reconcile(study=study))
    publications = Publication.objects.filter(study=study, dry_run=False).exclude(platform="link").exclude(
        status__in=[Publication.Status.FAILED])
    for publication in publications:
        platform = get_platform(publication.platform)
        remote = platform.sync(external_ids=publication.external_ids)
        report.remote += len(remote)
        ids = [item.platform_assignment_id for item in remote]
        local = {a.platform_assignment_id: a for a in Assignment.objects.filter(
            study=study, platform_assignment_id__in=ids).select_related("participant")}
        answered = set(Annotation.objects.filter(claim__assignment__in=[a.pk for a in local.values()])
                       .values_list("claim__assignment", flat=True).distinct())
        for item in remote:
            assignment = local.get(item.platform_assignment_id)
            flag = ""
            if item.status in ("submitted", "approved", "rejected"):
                if assignment is None:
                    flag = PlatformSubmission.Flag.NO_LOCAL_ASSIGNMENT
                elif assignment.pk not in answered:
                    flag = PlatformSubmission.Flag.NO_ANSWERS
            PlatformSubmission.objects.update_or_create(
                publication=publication, platform_assignment_id=item.platform_assignment_id,
                defaults={"platform_task_id": item.platform_task_id, "worker_id": item.worker_id,
                          "platform_status": item.raw_status, "assignment": assignment, "flag": flag,
                          "accepted_at": item.accepted_at, "submitted_at": item.submitted_at},
            )
            if flag:
                report.flagged += 1
                report.flags.append({"platform_assignment_id": item.platform_assignment_id,
                                     "worker_id": item.worker_id, "flag": flag})
            if assignment is None:
                continue
            report.matched += 1
            if item.status in ("approved", "rejected") and assignment.status in (
                    Assignment.Status.SUBMITTED, Assignment.Status.ACTIVE):
                _assignment_reviewed(assignment.pk, approved=item.status == "approved")
                report.status_updates += 1
    return report


# --- review, pay, block, close -----------------------------------------------------------------

def _assignment_platform(assignment: Assignment) -> str:
    return assignment.participant.platform


def _check_reviewable(assignment: Assignment) -> None:
    if assignment.status != Assignment.Status.SUBMITTED:
        raise PlatformServiceError(
            f"assignment {assignment.pk} is {assignment.get_status_display().lower()}, not submitted: only "
            "submitted work can be approved or rejected"
        )


def assignment_approve(*, assignment: Assignment, user=None, feedback: str = "") -> Assignment:
    """Approve submitted work (and so pay its reward). Approving twice sends nothing twice."""
    assignment = Assignment.objects.select_related("participant", "study").get(pk=assignment.pk)
    if assignment.status == Assignment.Status.APPROVED:
        return assignment
    _check_reviewable(assignment)
    name = _assignment_platform(assignment)
    if name != "link":
        platform = get_platform(name)
        platform_call_execute(
            spec=CallSpec(platform=name, operation=OP.APPROVE,
                          idempotency_key=f"{name}:approve:{assignment.platform_assignment_id}",
                          amount=money(assignment.study.reward), currency=platform.currency,
                          request_summary={"platform_assignment_id": assignment.platform_assignment_id,
                                           "worker_id": assignment.participant.external_id},
                          user=_user(user), study=assignment.study, assignment=assignment),
            send=lambda: platform.approve(platform_assignment_id=assignment.platform_assignment_id, feedback=feedback),
            reconcile=lambda call: reconcile_call(platform=platform, call=call),
        )
    _assignment_reviewed(assignment.pk, approved=True)
    assignment.refresh_from_db()
    return assignment


def assignment_reject(*, assignment: Assignment, user=None, feedback: str, category: str = "") -> Assignment:
    """Reject submitted work with the reason the worker will read (MTurk requires it; Prolific
    needs at least 100 characters and a category)."""
    assignment = Assignment.objects.select_related("participant", "study").get(pk=assignment.pk)
    if assignment.status == Assignment.Status.REJECTED:
        return assignment
    _check_reviewable(assignment)
    feedback = (feedback or "").strip()
    if not feedback:
        raise PlatformServiceError("a rejection needs feedback: tell the worker why their work was rejected")
    name = _assignment_platform(assignment)
    if name == "prolific":
        category = category or "FAILED_CHECK"
        if category not in REJECTION_CATEGORIES:
            raise PlatformServiceError(f"rejection category {category!r} is not one of {', '.join(REJECTION_CATEGORIES)}")
        if len(feedback) < MIN_REJECTION_MESSAGE:
            raise PlatformServiceError(
                f"Prolific needs a rejection message of at least {MIN_REJECTION_MESSAGE} characters; this one has "
                f"{len(feedback)}: explain what went wrong in more detail"
            )
    if name != "link":
        platform = get_platform(name)
        platform_call_execute(
            spec=CallSpec(platform=name, operation=OP.REJECT,
                          idempotency_key=f"{name}:reject:{assignment.platform_assignment_id}",
                          request_summary={"platform_assignment_id": assignment.platform_assignment_id,
                                           "worker_id": assignment.participant.external_id,
                                           "feedback": feedback[:1024], "category": category},
                          user=_user(user), study=assignment.study, assignment=assignment),
            send=lambda: platform.reject(platform_assignment_id=assignment.platform_assignment_id,
                                         feedback=feedback, category=category),
            reconcile=lambda call: reconcile_call(platform=platform, call=call),
        )
    _assignment_reviewed(assignment.pk, approved=False)
    assignment.refresh_from_db()
    return assignment


def study_approve_all(*, study: Study, user=None) -> dict:
    """Approve every submitted assignment of ``study``; errors are collected, not raised."""
    approved, errors = 0, []
    for assignment in Assignment.objects.filter(study=study, status=Assignment.Status.SUBMITTED).order_by("id"):
        try:
            assignment_approve(assignment=assignment, user=user)
            approved += 1
        except (PlatformServiceError, PlatformError) as exc:
            errors.append(f"assignment {assignment.pk}: {exc.message}")
    return {"approved": approved, "errors": errors}


def bonus_token(*, assignment: Assignment, amount: Decimal, kind: str, reason: str) -> str:
    digest = hashlib.sha256(f"{assignment.pk}|{money(amount)}|{kind}|{reason.strip()}".encode()).hexdigest()
    return f"rlb{_install_tag()}-a{assignment.pk}-{digest[:24]}"[:64]


def bonus_pay(*, assignment: Assignment, amount: Decimal, reason: str, user=None,
              kind: str = Bonus.Kind.OTHER) -> Bonus:
    """Pay ``amount`` to the worker of ``assignment``. The same bonus (assignment, amount, kind,
    reason) is one ``Bonus`` row and is paid once, however often this is called."""
    assignment = Assignment.objects.select_related("participant", "study").get(pk=assignment.pk)
    try:
        amount = Decimal(str(amount))
    except ArithmeticError as exc:
        raise PlatformServiceError(f"bonus amount {amount!r} is not a number") from exc
    if amount <= 0 or amount != money(amount):
        raise PlatformServiceError(f"bonus amount {amount} must be positive with at most two decimals")
    limit = Decimal(str(_setting("RL_MAX_BONUS", MAX_BONUS)))
    if amount > limit:
        raise PlatformServiceError(f"bonus amount {amount} is above the limit of {limit} (RL_MAX_BONUS)")
    reason = (reason or "").strip()
    if not reason:
        raise PlatformServiceError("a bonus needs a reason the worker will read")
    if kind not in Bonus.Kind.values:
        raise PlatformServiceError(f"bonus kind {kind!r} is not one of {', '.join(Bonus.Kind.values)}")
    if assignment.status not in (Assignment.Status.SUBMITTED, Assignment.Status.APPROVED):
        raise PlatformServiceError(
            f"assignment {assignment.pk} is {assignment.get_status_display().lower()}: bonuses go to submitted "
            "or approved work"
        )
    name = _assignment_platform(assignment)
    platform = get_platform(name)
    token = bonus_token(assignment=assignment, amount=amount, kind=kind, reason=reason)
    with transaction.atomic():
        bonus, _ = Bonus.objects.select_for_update().get_or_create(
            token=token,
            defaults={"assignment": assignment, "participant": assignment.participant, "kind": kind,
                      "amount": money(amount), "currency": platform.currency, "reason": reason,
                      "created_by": _user(user)},
        )
        if bonus.status in (Bonus.Status.PAID, Bonus.Status.RECORDED):
            return bonus
        if name == "link":
            bonus.status = Bonus.Status.RECORDED
            bonus.save(update_fields=["status"])
            return bonus
    summary = {"platform_assignment_id": assignment.platform_assignment_id,
               "worker_id": assignment.participant.external_id, "amount": str(bonus.amount), "kind": kind,
               "reason": reason[:500]}
    common = {"user": _user(user), "study": assignment.study, "assignment": assignment}
    try:
        if name == "prolific":
            call = _prolific_bonus(platform=platform, assignment=assignment, bonus=bonus, summary=summary,
                                   common=common)
        else:
            call = platform_call_execute(
                spec=CallSpec(platform=name, operation=OP.BONUS, idempotency_key=f"{name}:bonus:{token}",
                              platform_token=token, amount=bonus.amount, currency=bonus.currency,
                              request_summary=summary, **common),
                send=lambda: platform.bonus(worker_id=assignment.participant.external_id,
                                            platform_assignment_id=assignment.platform_assignment_id,
                                            amount=bonus.amount, reason=reason, token=token),
                reconcile=lambda call: reconcile_call(platform=platform, call=call),
            )
    except PlatformError as exc:
        Bonus.objects.filter(pk=bonus.pk).update(status=Bonus.Status.FAILED)
        raise PlatformServiceError(f"bonus for assignment {assignment.pk} failed: {exc.message}") from exc
    except PlatformServiceError:
        Bonus.objects.filter(pk=bonus.pk, status=Bonus.Status.PENDING).update(
            platform_call=PlatformCall.objects.filter(idempotency_key=f"{name}:bonus:{token}").first())
        raise
    Bonus.objects.filter(pk=bonus.pk).update(status=Bonus.Status.PAID, paid_at=timezone.now(), platform_call=call)
    bonus.refresh_from_db()
    return bonus


def _prolific_bonus(*, platform, assignment, bonus, summary, common) -> PlatformCall:
    publication = (Publication.objects.filter(study=assignment.study, platform="prolific", dry_run=False)
                   .exclude(external_ids=[]).order_by("-batch").first())
    study_external_id = assignment.platform_task_id or (publication.prolific_study_id if publication else "")
    if not study_external_id:
        raise PlatformServiceError(f"assignment {assignment.pk} has no Prolific study id: sync the study first")
    setup = platform_call_execute(
        spec=CallSpec(platform="prolific", operation=OP.BONUS_SETUP,
                      idempotency_key=f"prolific:bonus_setup:{bonus.token}",
                      request_summary={**summary, "study_id": study_external_id}, **common),
        send=lambda: platform.bonus_setup(study_external_id=study_external_id,
                                          submission_id=assignment.platform_assignment_id, amount=bonus.amount),
        reconcile=lambda call: False,  # a set-up bonus moves no money until paid: set it up again
    )
    bulk_id = setup.response["id"]
    Bonus.objects.filter(pk=bonus.pk).update(platform_call=setup)
    return platform_call_execute(
        spec=CallSpec(platform="prolific", operation=OP.BONUS, idempotency_key=f"prolific:bonus:{bonus.token}",
                      amount=bonus.amount, currency=bonus.currency,
                      request_summary={**summary, "bulk_bonus_id": bulk_id}, **common),
        send=lambda: platform.bonus_pay(bulk_id=bulk_id),
        reconcile=lambda call: reconcile_call(platform=platform, call=call),
    )


def study_bonus_candidates(*, study: Study, min_accuracy: float = 0.8) -> dict[str, list[int]]:
    """Assignment ids that earn the SPEC's bonuses: ``flagged_error`` (an answer whose payload
    carries a truthy ``"flag"``: the worker reported a broken question) and ``good_work`` (every
    attention check passed, and the final answers match the gold answer at least ``min_accuracy``
    of the time)."""
    done = Assignment.objects.filter(study=study, status__in=[Assignment.Status.SUBMITTED, Assignment.Status.APPROVED])
    flagged, good = set(), []
    stats: dict[int, dict[str, int]] = {}
    rows = Annotation.objects.filter(claim__assignment__in=done).values_list(
        "claim__assignment", "step", "answer", "payload", "claim__unit__item__gold_answer",
        "claim__unit__generalization_question__answer")
    final_steps = {Annotation.Step.AFTER, Annotation.Step.VALIDATION}
    for assignment_id, step, answer, payload, gold, genq_answer in rows:
        entry = stats.setdefault(assignment_id, {"checks": 0, "checks_ok": 0, "answers": 0, "correct": 0})
        if isinstance(payload, dict) and payload.get("flag"):
            flagged.add(assignment_id)
        if step == Annotation.Step.ATTENTION:
            entry["checks"] += 1
            entry["checks_ok"] += int(bool((payload or {}).get("correct")))
        elif step in final_steps and (genq_answer or gold):
            entry["answers"] += 1
            entry["correct"] += int(answer == (genq_answer or gold))
    for assignment_id, entry in sorted(stats.items()):
        if entry["checks"] and entry["checks_ok"] < entry["checks"]:
            continue
        if entry["answers"] and entry["correct"] / entry["answers"] >= min_accuracy:
            good.append(assignment_id)
    return {"flagged_error": sorted(flagged), "good_work": good}


def worker_block(*, participant: Participant, reason: str, user=None, study: Study | None = None) -> Participant:
    """Block a worker: in the app (the questionnaire refuses blocked participants) and on MTurk."""
    reason = (reason or "").strip()
    if not reason:
        raise PlatformServiceError("blocking a worker needs a reason (MTurk shows it to the worker)")
    if participant.platform == "mturk":
        platform = get_platform("mturk")
        platform_call_execute(
            spec=CallSpec(platform="mturk", operation=OP.BLOCK,
                          idempotency_key=f"mturk:block:{participant.external_id}",
                          request_summary={"worker_id": participant.external_id, "reason": reason[:500]},
                          user=_user(user), study=study),
            send=lambda: platform.block(worker_id=participant.external_id, reason=reason),
            reconcile=lambda call: False,
        )
    Participant.objects.filter(pk=participant.pk).update(blocked=True)
    participant.refresh_from_db()
    return participant


def workers_notify(*, study: Study, subject: str, message: str, user=None,
                   participants: list[Participant] | None = None) -> dict:
    """Message MTurk workers of ``study`` (all who worked on it, or ``participants``)."""
    if not subject.strip() or not message.strip():
        raise PlatformServiceError("a notification needs a subject and a message")
    if participants is None:
        participants = list(Participant.objects.filter(assignments__study=study, platform="mturk").distinct())
    worker_ids = sorted({p.external_id for p in participants if p.platform == "mturk"})
    if not worker_ids:
        return {"notified": 0}
    platform = get_platform("mturk")
    digest = hashlib.sha256(f"{subject}|{message}|{','.join(worker_ids)}".encode()).hexdigest()[:24]
    call = platform_call_execute(
        spec=CallSpec(platform="mturk", operation=OP.NOTIFY, idempotency_key=f"mturk:notify:{study.pk}:{digest}",
                      request_summary={"subject": subject[:200], "n_workers": len(worker_ids)},
                      user=_user(user), study=study),
        send=lambda: platform.notify(worker_ids=worker_ids, subject=subject, message=message),
        reconcile=lambda call: False,
    )
    return call.response


def study_add_assignments(*, study: Study, user=None) -> dict:
    """MTurk: add assignments to the study's HITs for units still short of their quota.

    Needed tasks = ceil(places still open in units / units per task) minus assignments still
    available on the HITs. HITs created with fewer than 10 assignments stay below 10 (MTurk
    refuses to cross that line); what does not fit is reported for a new batch."""
    publication = (Publication.objects.filter(study=study, platform="mturk", dry_run=False,
                                              status=Publication.Status.PUBLISHED).order_by("-batch").first())
    if publication is None:
        raise PlatformServiceError(f"study {study.name!r} has no published MTurk batch to extend")
    platform = get_platform("mturk")
    short = Unit.objects.filter(study=study).aggregate(
        quota=Sum("quota"), claimed=Sum("n_claimed"))
    open_places = (short["quota"] or 0) - (short["claimed"] or 0)
    needed = math.ceil(max(0, open_places) / study.units_per_task)
    hits = [(entry, platform.get_hit(hit_id=entry["hit_id"])) for entry in publication.external_ids
            if entry.get("hit_id")]
    available = sum(hit.get("NumberOfAssignmentsAvailable", 0) for _, hit in hits)
    to_add = needed - available
    added, calls = 0, []
    for entry, hit in hits:
        if to_add <= 0:
            break
        current = hit.get("MaxAssignments", 0)
        cap = 9 if current < 10 else 10_000
        room = cap - current
        if room <= 0:
            continue
        n = min(room, to_add)
        target = current + n
        token = f"{publication.request_token}-x{entry['index']}-{target}"[:64]
        platform_call_execute(
            spec=CallSpec(platform="mturk", operation=OP.ADD_ASSIGNMENTS,
                          idempotency_key=f"mturk:add_assignments:{entry['hit_id']}:to{target}",
                          platform_token=token,
                          amount=platform.estimate_cost(spec_reward=study.reward, n_tasks=n,
                                                        max_assignments_per_hit=target).total,
                          request_summary={"hit_id": entry["hit_id"], "n": n, "target_max_assignments": target},
                          user=_user(user), study=study, publication=publication),
            send=lambda hit_id=entry["hit_id"], n=n, token=token: platform.add_assignments(
                hit_id=hit_id, n=n, token=token),
            reconcile=lambda call: reconcile_call(platform=platform, call=call),
        )
        added += n
        to_add -= n
        calls.append({"hit_id": entry["hit_id"], "added": n})
    return {"needed": needed, "available": available, "added": added, "not_placed": max(0, to_add), "hits": calls}


def study_close(*, study: Study, user=None) -> list[Publication]:
    """Stop recruiting: expire the HITs, stop the Prolific study, close the links. Work already
    started can still be submitted and reviewed."""
    closed = []
    publications = Publication.objects.filter(study=study, dry_run=False, status__in=[
        Publication.Status.PUBLISHED, Publication.Status.PUBLISHING])
    for publication in publications:
        if publication.platform == "link":
            links_close(study=study)
        else:
            platform = get_platform(publication.platform)
            operation = OP.EXPIRE_HIT if publication.platform == "mturk" else OP.STOP_STUDY
            try:
                platform_call_execute(
                    spec=CallSpec(platform=publication.platform, operation=operation,
                                  idempotency_key=f"{publication.platform}:close:{publication.request_token}",
                                  request_summary={"external_ids": publication.external_ids},
                                  user=_user(user), study=study, publication=publication),
                    send=lambda p=publication, prov=platform: prov.close(external_ids=p.external_ids),
                    reconcile=lambda call: False,
                )
            except PlatformError as exc:
                raise PlatformServiceError(f"closing {publication} failed: {exc.message}") from exc
        with transaction.atomic():
            Publication.objects.filter(pk=publication.pk).update(status=Publication.Status.CLOSED,
                                                                 closed_at=timezone.now())
        closed.append(publication)
    Study.objects.filter(pk=study.pk).update(status=Study.Status.CLOSED)
    study.status = Study.Status.CLOSED
    return closed


def study_platform_overview(*, study: Study) -> dict:
    """What the admin page shows: publications, submissions by flag, audit totals."""
    calls = PlatformCall.objects.filter(study=study)
    return {
        "publications": list(Publication.objects.filter(study=study).order_by("-created_at")),
        "assignments": dict(Assignment.objects.filter(study=study).values_list("status").annotate(n=Count("id"))),
        "flagged": PlatformSubmission.objects.filter(publication__study=study).exclude(flag="").count(),
        "calls": dict(calls.values_list("status").annotate(n=Count("id"))),
        "paid": calls.filter(status=PlatformCall.Status.CONFIRMED).aggregate(total=Sum("amount"))["total"]
        or Decimal("0"),
        "bonuses": Bonus.objects.filter(assignment__study=study).count(),
    }


__all__ = [
    "HourlyPay",
    "SyncReport",
    "assignment_approve",
    "assignment_reject",
    "bonus_pay",
    "mturk_qualification_ensure",
    "mturk_qualification_grant_passed",
    "study_add_assignments",
    "study_approve_all",
    "study_bonus_candidates",
    "study_close",
    "study_cost_estimate",
    "study_effective_hourly_pay",
    "study_prolific_completion_code",
    "study_platform_overview",
    "study_publish",
    "study_sync",
    "study_task_count",
    "worker_block",
    "workers_notify",
    "external_question_xml",
]
