"""Admin for crowd platforms: publications, the platform-call audit (read-only), bonuses, links,
MTurk qualification types and synced submissions.

A researcher's page per study, ``/admin/annotations/publication/publish/<study_id>/``, shows
the cost estimate, the effective hourly pay against the floor, the balance (on request), and
buttons that call the services: publish (or dry run), sync, approve all, pay bonuses, make
links, close. Every button is a POST; GET never changes anything. Each button needs the access
its service checks (``PUBLISH_ACTION_ACCESS``), and the page shows only those the user may press.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from annotations.admin.actions import BonusForm, post_action, task_ids
from annotations.admin.core import KEYS_HIDDEN, KeysShownAdmin, ReadOnlyMixin
from annotations.models import (
    Bonus,
    MTurkQualificationType,
    OpenLink,
    ParticipantLink,
    PlatformCall,
    PlatformSubmission,
    Publication,
)
from annotations.platforms.base import PlatformError
from annotations.selectors.cost import study_cost_and_pay
from annotations.selectors.platforms import (
    study_approve_all_tasks,
    study_bonus_candidates,
    study_dry_runs_shown,
    study_good_work_not_judged,
    study_link_rows,
    study_platform_overview,
)
from annotations.selectors.progress import study_early_stopping
from annotations.selectors.review import study_attention_failures
from annotations.services.links import link_public_url, link_revoke, links_generate, open_link_create
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import (
    APPROVE,
    BONUS,
    CLOSE,
    PUBLISH,
    PlatformAccessDenied,
    access_study,
    may_hand_out_links,
    study_assignments,
)
from annotations.services.platforms.bonus import study_bonuses_pay
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import platform_balance, study_publish
from annotations.services.platforms.review import study_approve_all, submission_clear
from annotations.services.platforms.sync import study_sync
from annotations.tasks.platforms import approve_assignments_task, pay_bonuses_task, queue_in_batches
from lab.ids import parse_id
from lab.spreadsheet import csv_writer
from studies.admin.scoping import RawWorkerIdsAdmin, StudyScopedAdmin
from studies.models import Platform, Study
from studies.selectors import PAY, VIEW, studies_for_user

# Up to this many approvals or bonuses run in the request; more go to the Celery queue.
INLINE_LIMIT = 50
# Panels a higher app adds to the publish page: callables (request, study) -> rendered HTML. The
# cockpit adds the study planner's "How precise will this study be?" (``cockpit.precision``), which
# needs ``scoring``; annotations may not import scoring, so the cockpit hands it in here.
PUBLISH_PAGE_PANELS: list = []


class ReadOnlyAdmin(ReadOnlyMixin, StudyScopedAdmin):
    """A study-scoped list nobody adds to, edits or deletes from here: its rows are written by
    services (audits, flags), and its actions call them."""


@admin.register(Publication)
class PublicationAdmin(KeysShownAdmin):
    """Read-only. A publication's completion code, and its plan (what was sent, which holds the
    Prolific completion code), are shown only to those who may hand them out (``KeysShownAdmin``)."""

    list_display = ("study", "platform", "batch", "status", "dry_run", "n_tasks", "estimated_cost", "currency",
                    "created_at", "publish_page")
    list_filter = ("platform", "status", "dry_run")
    linked_lookups = ("study",)  # the cockpit's "Publications" link: ?study__id__exact=
    search_fields = ("study__name", "request_token")
    readonly_fields = [f.name for f in Publication._meta.fields]
    key_fields = ("completion_code", "plan")
    change_list_template = "admin/annotations/platforms/publication_changelist.html"

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        # Nothing to edit here (publishing, closing and sync are the publish page's services);
        # saving the page would write back a status a publish or close in flight had moved.
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="Researcher page")
    def publish_page(self, obj: Publication):
        return format_html('<a href="{}">open</a>', reverse("admin:annotations_publication_publish", args=[obj.study_id]))

    def get_urls(self):
        urls = super().get_urls()
        custom = [
            path("publish/", self.admin_site.admin_view(self.study_list_view), name="annotations_publication_studies"),
            path("publish/<int:study_id>/", self.admin_site.admin_view(self.publish_view),
                 name="annotations_publication_publish"),
            path("publish/<int:study_id>/links.csv", self.admin_site.admin_view(self.links_csv_view),
                 name="annotations_publication_links_csv"),
        ]
        return custom + urls

    def _check(self, request: HttpRequest) -> None:
        """The pages' model permission; each button's own is ``publish_action_refusal``'s."""
        if not request.user.has_perm("annotations.view_publication"):
            raise PermissionDenied

    def study_list_view(self, request: HttpRequest) -> HttpResponse:
        self._check(request)
        context = {**self.admin_site.each_context(request), "title": "Publish a study",
                   "studies": studies_for_user(user=request.user).order_by("name"), "opts": self.model._meta}
        return TemplateResponse(request, "admin/annotations/platforms/studies.html", context)

    def publish_view(self, request: HttpRequest, study_id: int) -> HttpResponse:
        """Seeing the page needs VIEW access to the study; each button (a POST) needs the access
        its service checks (``PUBLISH_ACTION_ACCESS``: closing and withdrawing a link CHANGE, the
        rest PAY), refused before anything is read or done (``publish_action_refusal``): the page
        comes back with "Nothing was done: <why>", as a refusal of the service itself reads
        (``post_action``). The page shows only the buttons the user may press, and why the others
        are not offered (each distinct reason once). The links' addresses and completion codes are
        shown only to those who may hand them out (``may_hand_out_links``): a reader without it
        sees each link's label, state, task and worker."""
        self._check(request)
        study = get_object_or_404(studies_for_user(user=request.user, access=VIEW), pk=study_id)
        url = reverse("admin:annotations_publication_publish", args=[study.pk])
        if request.method == "POST":
            action = request.POST.get("action", "")
            refusal = publish_action_refusal(user=request.user, study=study, action=action)
            # A refused button runs no handler: ``post_action`` reports the refusal as it reports the services'.
            post_action(request, {action: _refused(refusal)} if refusal else PUBLISH_ACTIONS, study)
            return HttpResponseRedirect(url)
        # The platform priced in the estimate: the study's, or another one for a quote (a study is
        # published only on its own: the publish card always names that one).
        platform_name = request.GET.get("platform") or study.platform
        if platform_name not in Platform.values:
            platform_name = study.platform
        cost = study_cost_and_pay(study=study, platform_name=platform_name)
        estimate = cost.estimate
        balance, balance_error = None, ""
        if request.GET.get("balance"):
            try:
                balance = platform_balance(user=request.user, study=study, platform_name=platform_name)
                if balance is None:
                    balance_error = "this platform has no balance call; check it in the platform's web app"
            except PlatformAccessDenied as exc:
                balance_error = f"the account's balance is shown only to who may publish this study ({exc})"
            except PlatformError as exc:
                balance_error = exc.message
        candidates = study_bonus_candidates(study=study)
        # The tasks "Approve all" names, prices and its form carries (``SHOWN_SUBMITTED``): a click pays
        # these only; those whose rejection is in flight are listed apart (``study_approve_all_tasks``).
        approve_all = study_approve_all_tasks(study=study)
        link_rows = study_link_rows(study=study)
        keys_shown = may_hand_out_links(user=request.user, study=study)
        refused: dict[str, str] = {}  # each access level read once for the buttons
        # Why each button is not offered ('' where it is: ``publish_action_refusal``).
        refusals = {action: publish_action_refusal(user=request.user, study=study, action=action, refused=refused)
                    for action in PUBLISH_ACTIONS}
        context = {
            **self.admin_site.each_context(request),
            "title": f"Crowd platform: {study.name}",
            "opts": self.model._meta,
            "study": study,
            "platform_name": platform_name,
            "platforms": Platform.choices,
            "cost": cost,
            # on the study's own platform, never the quote's
            "early_stopping": study_early_stopping(study=study, cost=cost if platform_name == study.platform else None),
            "estimate": estimate,
            "hourly": cost.hourly,
            "balance": balance,
            "balance_error": balance_error,
            "overview": study_platform_overview(study=study),
            "candidates": candidates,
            # Why this kind has no good-work list at all ("" where its answers are scored).
            "good_work_not_judged": study_good_work_not_judged(study=study),
            "calls": PlatformCall.objects.filter(study=study).order_by("-created_at")[:50],
            "dry_runs": study_dry_runs_shown(study=study),
            "submitted": len(approve_all.ids),
            "submitted_held": approve_all.held,  # of them, on hold: "Approve all" leaves them out, unpaid
            "submitted_ids": ",".join(map(str, approve_all.ids)),
            # Submitted, a rejection sent and its outcome not recorded: not listed, priced or approved.
            "submitted_rejecting": approve_all.rejecting,
            # Submitted, their platform session ended there and the hold cleared: the click refuses them.
            "submitted_ended": approve_all.ended,
            "candidate_ids": {kind: ",".join(map(str, ids)) for kind, ids in candidates.items()},
            # What "Approve all" pays: the rewards of the submitted tasks with the platform's fee, work on
            # hold left out (``assignments_on_hold``: "Approve all" refuses it and names it), and work
            # whose rejection is in flight (not listed at all).
            "approve_cost": study_cost_and_pay(study=study, n_tasks=approve_all.payable).estimate,
            "live": Publication.objects.filter(study=study, platform=study.platform, dry_run=False,
                                               status__in=[Publication.Status.PUBLISHED,
                                                           Publication.Status.PUBLISHING]).first(),
            # Without the right, no address (its holder's key) and no code reaches the template.
            "link_keys_shown": keys_shown,
            "links": [(row, link_public_url(row.link) if keys_shown else "") for row in link_rows[:500]],
            "link_counts": dict(Counter(row.state for row in link_rows)),
            "open_links": [(link, link_public_url(link) if keys_shown else "")
                           for link in OpenLink.objects.filter(study=study)],
            "attention": study_attention_failures(study=study),
            # Its tasks to reject only to who may reject them (the worker page's actions' rule).
            "attention_can_reject": keys_shown,
            # The buttons shown: those whose access the user holds (``publish_action_refusal``).
            "may": {action: not why for action, why in refusals.items()},
            "refusals": refusals,
            # The others, by the reason they are refused: each reason once, naming its buttons.
            "refused_buttons": _refused_buttons(refusals),
            "panels": [mark_safe(html) for html in (panel(request, study) for panel in PUBLISH_PAGE_PANELS)  # noqa: S308
                       if html],
        }
        return TemplateResponse(request, "admin/annotations/platforms/publish.html", context)

    def links_csv_view(self, request: HttpRequest, study_id: int) -> HttpResponse:
        """The study's single-person links as CSV: id, label, address, completion code, state, when
        first opened, and the task, worker pseudonym and review it became. A reader who may not hand
        the links out (``may_hand_out_links``) gets the same columns with the address and code cells
        empty: the rest is what the publish page shows them, and scripts reading the columns keep
        working."""
        self._check(request)
        study = get_object_or_404(studies_for_user(user=request.user, access=VIEW), pk=study_id)
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="study-{study.pk}-links.csv"'
        writer = csv_writer(response)
        # Columns are only appended: task, worker (pseudonym) and review say what each link became.
        writer.writerow(["id", "label", "url", "completion_code", "state", "redeemed_at", "task", "worker", "review"])
        keys_shown = may_hand_out_links(user=request.user, study=study)
        for row in study_link_rows(study=study):
            link = row.link
            url, code = (link_public_url(link), link.completion_code) if keys_shown else ("", "")
            writer.writerow([link.pk, link.label, url, code, row.state,
                             link.redeemed_at.isoformat() if link.redeemed_at else "", row.task_id or "",
                             row.worker, row.review])
        return response


def _publish(request: HttpRequest, study: Study) -> str:
    dry_run = request.POST.get("dry_run") == "on"
    # The platform the button named: the study's, which the service checks again (a draft's platform
    # changed since the page was shown is refused, not published on in its place).
    publication = study_publish(study=study, user=request.user, dry_run=dry_run,
                                platform_name=request.POST.get("platform") or None,
                                options={"link_mode": request.POST.get("link_mode", "single")})
    if dry_run:
        messages.info(request, f"Dry run: {len(publication.plan.get('requests', []))} request(s) shown below; "
                               "nothing was sent.")
        return ""
    if publication.status == Publication.Status.CLOSED:  # the study was closed while it was being published
        messages.warning(request, f"Publishing {study.name} on {publication.platform} (batch {publication.batch}) "
                                  "stopped: the study was closed meanwhile, and what was made is stopped.")
        return ""
    return f"Published {study.name} on {publication.platform} (batch {publication.batch})."


def _sync(request: HttpRequest, study: Study) -> str:
    report = study_sync(study=study)
    for error in report.errors:
        messages.error(request, f"Sync could not read {error}")
    return (f"Synced: {report.remote} on the platform, {report.matched} matched, {report.flagged} flagged, "
            f"{report.status_updates} status updates, reconciled {report.reconciled}.")


# The hidden fields that carry what the page showed: "Approve all"'s submitted tasks, and each bonus
# kind's candidates (``shown_<kind>``). A click acts on these ids only (those still waiting now).
SHOWN_SUBMITTED = "shown_submitted"
SHOWN_CANDIDATES = {kind.value: f"shown_{kind.value}" for kind in (Bonus.Kind.FLAGGED_ERROR, Bonus.Kind.GOOD_WORK)}


@dataclass(frozen=True)
class ShownNow:
    """What a click on a list the page showed may act on: ``ids``, the shown ids still in the set
    now; ``skipped``, how many shown ones left it meanwhile; ``arrived``, how many joined it after
    the page was loaded (not acted on: the page now shows them)."""

    ids: list[int]
    skipped: int
    arrived: int

    def note(self, left: str, joined: str) -> str:
        """The sentences after the count: the shown ids skipped (``left`` says why) and the
        arrivals left for the next click (``joined`` names them)."""
        parts = []
        if self.skipped:
            parts.append(f" {self.skipped} task(s) shown on the page {left} meanwhile and were skipped.")
        if self.arrived:
            parts.append(f" {self.arrived} more task(s) {joined} since the page was loaded: nothing was done to them; "
                         "the page now shows them.")
        return "".join(parts)


def _shown_now(request: HttpRequest, study: Study, field: str, now: list[int]) -> ShownNow:
    """The ids of the hidden ``field`` (the list the page showed: assignment ids joined by commas,
    each a whole number from 1 to 2**63-1), kept where they are in ``now`` (the list as it is at
    the click). A missing field (a page loaded before the form carried it), text that is not such a
    list, or an id of another study's task refuses the whole click (``PlatformServiceError``
    naming the field): nothing is done. The services check each id again beside the write."""
    raw = request.POST.get(field)
    if raw is None:
        raise PlatformServiceError(f"the form does not say which tasks the page showed (field {field!r} is "
                                   "missing): reload the page and click again")
    shown: set[int] = set()
    for text in raw.split(",") if raw.strip() else []:
        pk = parse_id(text)
        if not pk:  # None, or 0: no task has it
            raise PlatformServiceError(f"field {field!r}: {text.strip()[:40]!r} is not a task number; the page "
                                       "carries the tasks it showed there: reload the page and click again")
        shown.add(pk)
    try:
        study_assignments(study=study, ids=shown)  # another study's task: refused, nothing done
    except PlatformServiceError as exc:
        raise PlatformServiceError(f"field {field!r} names tasks this page never showed: {exc.message}") from exc
    current = set(now)
    return ShownNow(ids=sorted(shown & current), skipped=len(shown - current), arrived=len(current - shown))


def _approve_all(request: HttpRequest, study: Study) -> str:
    """Approve the submitted tasks the page showed (``SHOWN_SUBMITTED``) that are still listed
    (``study_approve_all_tasks``, the page's own reading): work submitted after the page was loaded
    waits for the next click, whose page shows it; a shown task whose rejection was sent since is
    skipped and counted, and the page lists it apart."""
    user = request.user
    waiting = study_approve_all_tasks(study=study).ids
    shown = _shown_now(request, study, SHOWN_SUBMITTED, waiting)
    note = shown.note("were no longer waiting for review (approved, rejected, being rejected or withdrawn)",
                      "were submitted")
    ids = shown.ids
    if len(ids) > INLINE_LIMIT:
        access_study(user=user, study=study, access=PAY)  # refused now, not only in the task
        queue_in_batches(approve_assignments_task, study_id=study.pk, user_id=user.pk, assignment_ids=ids)
        return f"Approving {len(ids)} assignments in the background; reload to see the audit table fill." + note
    result = study_approve_all(user=user, study=study, assignment_ids=ids)
    for error in result["errors"][:20]:
        messages.error(request, error)
    return f"Approved {result['approved']} assignment(s)." + note


def _bonus(request: HttpRequest, study: Study) -> str:
    """The same bonus for the tasks listed, or for the kind's candidates the page showed
    (``SHOWN_CANDIDATES``) that are candidates still: checked and paid by
    ``bonus.study_bonuses_pay``, here or, for more than ``INLINE_LIMIT``, in ``pay_bonuses_task``
    batches that carry the study and the user."""
    asked = BonusForm(request.POST).asked()
    note = ""
    if asked.tasks.strip():
        ids = task_ids(asked.tasks)
    elif asked.kind in SHOWN_CANDIDATES:
        shown = _shown_now(request, study, SHOWN_CANDIDATES[asked.kind], study_bonus_candidates(study=study)[asked.kind])
        ids = shown.ids
        note = shown.note("were no longer candidates (withdrawn, rejected, put on hold, or their flag no longer "
                          "accepted)", "became candidates")
        if not ids:
            was = f"none of the {shown.skipped} it showed is one now" if shown.skipped else "it showed none"
            raise PlatformServiceError(f"no tasks to pay: the page listed the {asked.kind} candidates when it was "
                                       f"loaded, and {was}." + note)
    else:
        ids = []
    if not ids:
        raise PlatformServiceError("no tasks to pay: enter task numbers or pick a kind with candidates")
    user = request.user
    if len(ids) > INLINE_LIMIT:
        access_study(user=user, study=study, access=PAY)
        study_assignments(study=study, ids=ids)  # ids of another study: refused now, nothing queued
        queue_in_batches(pay_bonuses_task, study_id=study.pk, user_id=user.pk, assignment_ids=ids,
                         amount=asked.amount, reason=asked.reason, kind=asked.kind)
        return f"Paying {len(ids)} bonuses in the background; each is paid once." + note
    result = study_bonuses_pay(user=user, study=study, assignment_ids=ids, amount=asked.amount, reason=asked.reason,
                               kind=asked.kind)
    for error in result["errors"][:20]:
        messages.error(request, error)
    return f"Bonus paid (or already paid) for {result['paid']} assignment(s)." + note


def _make_links(request: HttpRequest, study: Study) -> str:
    links = links_generate(study=study, n=int(request.POST.get("count") or 0), user=request.user,
                           label=request.POST.get("label", ""))
    return (f"Made {len(links)} single-person link(s). The study's plain link now starts no task (even if "
            "these are withdrawn); publish an open link to admit anonymous workers again.")


def _open_link(request: HttpRequest, study: Study) -> str:
    raw = request.POST.get("max_participants") or ""
    link = open_link_create(study=study, user=request.user, completion_code=request.POST.get("completion_code", ""),
                            max_participants=int(raw) if raw else None)
    return f"Open link: {link_public_url(link)} (code {link.completion_code})."


def _revoke_link(request: HttpRequest, study: Study) -> str:
    link = get_object_or_404(ParticipantLink, study=study, pk=int(request.POST.get("link_id") or 0))
    link_revoke(link=link, user=request.user)
    return f"Link {link.pk} withdrawn: it can no longer be opened."


def _close(request: HttpRequest, study: Study) -> str:
    return f"Closed {len(study_close(user=request.user, study=study))} publication(s)."


def _refused(refusal: str):
    """A handler for a button ``publish_action_refusal`` refuses: it does nothing and raises the
    refusal, which ``post_action`` shows as it shows a service's ("Nothing was done: ...")."""
    def handler(request: HttpRequest, study: Study) -> str:
        raise PlatformAccessDenied(refusal)
    return handler


def _refused_buttons(refusals: dict[str, str]) -> list[tuple[str, list[str]]]:
    """Each distinct reason of ``refusals`` (an action's refusal, '' when offered) with the names of
    the buttons it refuses (``PUBLISH_ACTION_LABELS``), in the page's order."""
    by_reason: dict[str, list[str]] = {}
    for action, why in refusals.items():
        if why:
            by_reason.setdefault(why, []).append(PUBLISH_ACTION_LABELS.get(action, action))
    return [(why, labels) for why, labels in by_reason.items()]


# The publish page's buttons (``post_action``): each calls one platform service as the user.
PUBLISH_ACTIONS = {
    "publish": _publish,
    "sync": _sync,
    "approve_all": _approve_all,
    "bonus": _bonus,
    "make_links": _make_links,
    "open_link": _open_link,
    "revoke_link": _revoke_link,
    "close": _close,
}
# The buttons as the page names them, where it says why one is not offered.
PUBLISH_ACTION_LABELS = {
    "publish": "Publish",
    "sync": "Sync now",
    "approve_all": "Approve all submitted",
    "bonus": "Pay bonus",
    "make_links": "Make single-person links",
    "open_link": "Make an open link",
    "revoke_link": "Withdraw a link",
    "close": "Close study",
}
# The access each button needs: the level its service checks beside the write, named as the services
# name it (``platforms.access``: ``study_publish``, ``links_generate`` and ``open_link_create``
# PUBLISH, ``study_approve_all`` APPROVE, ``study_bonuses_pay`` BONUS, ``study_close`` and
# ``link_revoke`` CLOSE). Sync takes no user: it reads and settles the platform's payments, a PAY
# action (``access_study``). A button not listed here needs PAY.
PUBLISH_ACTION_ACCESS = {
    "publish": PUBLISH,
    "sync": PAY,
    "approve_all": APPROVE,
    "bonus": BONUS,
    "make_links": PUBLISH,
    "open_link": PUBLISH,
    "revoke_link": CLOSE,
    "close": CLOSE,
}


def publish_action_refusal(*, user, study: Study, action: str, refused: dict | None = None) -> str:
    """Why ``user`` may not press the publish page's button ``action`` on ``study`` ('' when they
    may): its access (``PUBLISH_ACTION_ACCESS``) read by ``access_study``, the services' own check,
    so the page refuses what the service would and offers what it allows. A PAY button also needs
    ``annotations.add_publication``, as every button did; closing and withdrawing a link need no
    more than their services (as the study admin's "Close" and the links admin's "Withdraw").
    ``refused`` caches the answer per access level across the calls of one page."""
    access = PUBLISH_ACTION_ACCESS.get(action, PAY)
    cache = {} if refused is None else refused
    if access not in cache:
        why = ""
        if access == PAY and not user.has_perm("annotations.add_publication"):
            why = "publishing, reviewing and paying need annotations.add_publication"
        else:
            try:
                access_study(user=user, study=study, access=access)
            except PlatformAccessDenied as exc:
                why = exc.message
        cache[access] = why
    return cache[access]


@admin.register(PlatformCall)
class PlatformCallAdmin(ReadOnlyMixin, KeysShownAdmin, RawWorkerIdsAdmin):
    # What was sent and answered names workers by their platform ids, and a publish call carries the
    # study's completion code (Prolific's ``completion_codes``): shown only to those who may hand
    # the study's keys out too (``KeysShownAdmin``).
    raw_worker_id_fields = ("request_summary", "response")
    key_fields = ("request_summary", "response")
    list_display = ("created_at", "platform", "operation", "status", "amount", "currency", "study", "user",
                    "idempotency_key", "attempts", "error")
    list_filter = ("platform", "operation", "status")
    search_fields = ("idempotency_key", "platform_token", "study__name")
    readonly_fields = [f.name for f in PlatformCall._meta.fields]
    date_hierarchy = "created_at"


@admin.register(Bonus)
class BonusAdmin(ReadOnlyAdmin, RawWorkerIdsAdmin):
    study_path = "assignment__study"
    raw_worker_id_fields = ("external_id",)
    list_display = ("created_at", "participant", "assignment", "kind", "amount", "currency", "status", "paid_at",
                    "error")
    list_filter = ("kind", "status")
    search_fields = ("token", "participant__external_id", "reason")
    readonly_fields = [f.name for f in Bonus._meta.fields]


class LinkKeysAdmin(KeysShownAdmin):
    """A link admin: a link's token, address and completion code are shown only to those who may
    hand them out (``KeysShownAdmin``): a VIEW or CHANGE share lists the links without them, as on
    the publish page."""

    key_fields = ("token", "url", "completion_code")

    @admin.display(description="URL")
    def url(self, obj):
        return link_public_url(obj) if getattr(obj, "keys_shown", False) else KEYS_HIDDEN


@admin.register(ParticipantLink)
class ParticipantLinkAdmin(LinkKeysAdmin):
    """Only the label is edited here. A link's study, completion code and withdrawal are the link
    services' (``annotations.services.links``), which check the acting user's right: a link made
    for a study or given a new code recruits for it (PUBLISH), withdrawing stops it (CLOSE, the
    "Withdraw" action below) and nothing un-withdraws one. A CHANGE share is enough to edit a row
    here, so any of these fields editable would let its holder do what the services refuse."""

    list_display = ("id", "study", "label", "code", "participant", "redeemed_at", "revoked", "url")
    list_filter = ("revoked", "study")
    search_fields = ("label", "study__name")
    fields = ("study", "label", "completion_code", "revoked", "token", "url", "participant", "redeemed_at",
              "created_by", "created_at")
    readonly_fields = tuple(name for name in fields if name != "label")
    actions = ["revoke_links"]

    def has_add_permission(self, request, obj=None):
        return False  # links are made in bulk from the researcher page or `manage.py make_links`

    def has_delete_permission(self, request, obj=None):
        # A link is withdrawn ("Withdraw", ``link_revoke``), never deleted: a deleted link would
        # drop its task's tie to it (the CSV's task and review columns, which say whose code to
        # withhold) and the record of the completion code it handed out.
        return False

    def save_model(self, request, obj, form, change):
        """Write only what the form changed (the label): a full save would write back the
        ``revoked``, ``participant`` and ``redeemed_at`` read when the page was submitted, undoing a
        withdrawal or a redemption made meanwhile."""
        if change:
            obj.save(update_fields=form.changed_data)
        else:
            obj.save()

    @admin.action(description="Withdraw: the selected links can no longer be opened", permissions=["change"])
    def revoke_links(self, request, queryset):
        """Each link through ``link_revoke`` as the user, which checks their right to close its
        study, as the publish page's withdraw button does."""
        done, refused = 0, []
        for link in queryset:
            try:
                link_revoke(link=link, user=request.user)
                done += 1
            except PlatformServiceError as exc:
                refused.append(f"link {link.pk}: {exc.message}")
        for message in refused[:20]:
            self.message_user(request, message, messages.ERROR)
        if done:
            self.message_user(request, f"{done} link(s) withdrawn.", messages.SUCCESS)


@admin.register(OpenLink)
class OpenLinkAdmin(LinkKeysAdmin):
    """Nothing is edited here: an open link's study, publication, completion code, cap and state are
    the link services' (``annotations.services.links``), which check the acting user's right (see
    ``ParticipantLinkAdmin``); a publication dropdown would also list every researcher's publications,
    named by study. Stopping recruitment is ``study_close``'s (the publish page's "Close")."""

    list_display = ("id", "study", "code", "n_participants", "max_participants", "active", "url")
    list_filter = ("active",)
    readonly_fields = ("token", "n_participants", "created_at", "created_by", "url")

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # its participants and completion code stay on record; closing the study stops it


@admin.register(MTurkQualificationType)
class MTurkQualificationTypeAdmin(ReadOnlyAdmin):
    list_display = ("study", "kind", "qualification_type_id", "min_score", "endpoint", "created_at")


@admin.register(PlatformSubmission)
class PlatformSubmissionAdmin(ReadOnlyAdmin, RawWorkerIdsAdmin):
    study_path = "publication__study"
    raw_worker_id_fields = ("worker_id",)
    list_display = ("platform_assignment_id", "publication", "worker_id", "platform_status", "assignment", "flag",
                    "flagged_at", "cleared_at", "submitted_at", "synced_at")
    list_filter = ("flag", "platform_status", "publication__study")
    search_fields = ("platform_assignment_id", "worker_id")
    actions = ["clear_holds"]

    @admin.action(description="Clear the hold (a worker mismatch, work the platform does not list: it counts and may be approved and paid; work not submitted here: it may then be approved on its own, from the worker's page)")
    def clear_holds(self, request, queryset):
        allowed = set(self.model._default_manager.filter(**self._in_studies(request, PAY)).values_list("pk", flat=True))
        cleared = 0
        for submission in queryset:
            if submission.pk not in allowed:
                self.message_user(request, f"{submission}: you may not pay workers of this study.", messages.ERROR)
                continue
            try:
                submission_clear(user=request.user, submission=submission)
                cleared += 1
            except PlatformServiceError as exc:
                self.message_user(request, exc.message, messages.ERROR)
        if cleared:
            self.message_user(request, f"{cleared} hold(s) cleared.", messages.SUCCESS)
