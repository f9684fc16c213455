"""Admin for participants, units, assignments, answers, attention checks and qualification tests.

Answers are read-only here: they are written by the worker pages only. Every list holds only rows
of the studies the user may see, and workers appear as pseudonyms unless the user may see raw
worker ids (``studies.admin.scoping``)."""
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q
from django.db.models.constants import LOOKUP_SEP
from django.forms.models import BaseInlineFormSet
from django.http import HttpResponseRedirect
from django.urls import reverse

from annotations.models import (
    Annotation,
    Assignment,
    AttentionCheck,
    Claim,
    ConsentReceipt,
    Participant,
    QualificationGrant,
    QualificationQuestion,
    QualificationTest,
    Unit,
)
from annotations.services.entry import consent_text_sha256
from annotations.services.platforms.access import studies_handing_out_links
from annotations.services.qualification import (
    AttentionCheckRefused,
    QualificationSetupError,
    QualificationTestRefused,
    attention_check_delete,
    attention_check_save,
    attention_checks_fixed,
    qualification_test_delete,
    qualification_test_problem,
    qualification_test_save,
    qualification_test_taken,
)
from lab.pseudonyms import worker_pseudonym
from studies.admin.scoping import RawWorkerIdsAdmin, StudyScopedAdmin


class ReadOnlyMixin:
    """Rows the questionnaire and the services write: nobody adds, edits or deletes them here
    (deleting a unit, claim, answer or grant would skip what the services keep with it: the
    unit counters, a withdrawal's record, a test taken once)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


# What an admin shows in place of a token, address or code its reader may not be handed.
KEYS_HIDDEN = "shown to those who may pay this study's workers"


class KeysShownAdmin(StudyScopedAdmin):
    """An admin of rows that carry a study's keys (a link's or a task's token, which is its address,
    and a completion code): ``key_fields`` are shown only to those who may hand them out
    (``studies_handing_out_links``, read once per page as ``keys_shown`` on each row), and
    ``key_search_fields`` match a search only in those rows. A VIEW or CHANGE share lists and opens
    the rows without them, as on the publish page. The one mechanism of every such admin (links,
    tasks, publications); list columns show a key through a display method that reads
    ``keys_shown`` (``code`` here)."""

    key_fields: tuple[str, ...] = ()
    key_search_fields: tuple[str, ...] = ()

    def get_queryset(self, request):
        handing_out = studies_handing_out_links(user=request.user).filter(pk=OuterRef(self.study_path))
        return super().get_queryset(request).annotate(keys_shown=Exists(handing_out))

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if obj is not None and getattr(obj, "keys_shown", False):
            return fields
        return [name for name in fields if name not in self.key_fields]

    def get_search_results(self, request, queryset, search_term):
        """The search over ``search_fields``, plus the rows whose ``key_search_fields`` contain the
        whole term among those the user may be handed the keys of: a reader without the right
        cannot spell a code out by partial matches (the rule's rows only, not a list-wide switch)."""
        found, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if not term or not self.key_search_fields:
            return found, may_have_duplicates
        if not self.get_search_fields(request):
            found = queryset.none()  # Django returns the whole list when it has no field to search
        by_key = Q()
        for name in self.key_search_fields:
            by_key |= Q(**{f"{name}__icontains": term})
        keyed = self.model._default_manager.filter(
            by_key, **{f"{self.study_path}__in": studies_handing_out_links(user=request.user)})
        return (queryset.filter(Q(pk__in=found.values("pk")) | Q(pk__in=keyed.values("pk"))),
                may_have_duplicates)

    def lookup_refusal(self, lookup: str, value: str, request) -> str | None:
        """A list filter in the address (``?completion_code=...``) names a key only for a user who may
        be shown the keys of every study this list shows them: otherwise it would find a row by its
        key where the search finds it only in the rows the rule allows."""
        if lookup.split(LOOKUP_SEP, 1)[0] in {*self.key_fields, *self.key_search_fields} and request is not None:
            hidden = self._studies(request).exclude(pk__in=studies_handing_out_links(user=request.user).values("pk"))
            if hidden.exists():
                return ("a study's keys (tokens, completion codes) are filtered by only where you may be shown "
                        "them in every study you see; the search box finds them in the studies you may pay")
        return super().lookup_refusal(lookup, value, request)

    @admin.display(description="Completion code")
    def code(self, obj):
        return obj.completion_code if getattr(obj, "keys_shown", False) else KEYS_HIDDEN


@admin.register(Participant)
class ParticipantAdmin(StudyScopedAdmin, RawWorkerIdsAdmin):
    """Workers who took a task in a study the user may see. Nothing here is edited: a block is
    made on the worker's page of a study (``blocks.worker_block``, which decides what it covers and
    who may block everywhere); ``blocked`` is the superuser's block in every study."""

    study_path = "assignments__study"
    raw_worker_id_fields = ("external_id",)
    list_display = ("id", "platform", "worker", "external_id", "blocked", "created_at")
    list_filter = ("platform", "blocked")
    search_fields = ("external_id",)
    readonly_fields = ("platform", "worker", "external_id", "blocked", "created_at")

    def has_change_permission(self, request, obj=None):
        return False  # nothing to edit; saving the page would write back a block read before it was lifted

    def has_delete_permission(self, request, obj=None):
        # Deleting a worker would take their blocks (another researcher's, the superuser's) with
        # them and erase their answers without a withdrawal's record: ``participant_withdraw`` erases.
        return False

    @admin.display(description="worker (pseudonym)")
    def worker(self, obj: Participant) -> str:
        return worker_pseudonym(obj.platform, obj.external_id)


@admin.register(Unit)
class UnitAdmin(ReadOnlyMixin, StudyScopedAdmin):
    list_display = ("id", "study", "question_key", "source", "generalization_question", "quota", "n_claimed",
                    "n_completed", "filled")
    list_filter = ("study", "source")
    search_fields = ("question_key", "item__question")
    list_select_related = ("study", "source", "generalization_question")

    @admin.display(description="Filled", boolean=True)
    def filled(self, obj: Unit) -> bool:
        return obj.n_completed >= obj.quota


class AnnotationInline(ReadOnlyMixin, admin.TabularInline):
    model = Annotation
    fields = ("step", "answer", "payload", "shown_at", "answered_at", "duration_ms")
    readonly_fields = fields
    extra = 0
    can_delete = False


class ClaimInline(ReadOnlyMixin, admin.TabularInline):
    model = Claim
    fields = ("position", "question_key", "unit", "attention_check", "completed_at", "released")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Assignment)
class AssignmentAdmin(KeysShownAdmin, RawWorkerIdsAdmin):
    """Read-only: reviews (approve, reject, bonus) go through the platforms' services. A task's
    token (its address ``/w/<token>/``: whoever has it answers as its worker) and completion code
    are shown and searched only where the user may hand them out (``KeysShownAdmin``)."""

    raw_worker_id_fields = ("external_id",)
    key_fields = ("token", "completion_code")
    key_search_fields = ("completion_code",)

    list_display = ("id", "study", "participant", "status", "n_claims", "n_completed", "created_at", "expires_at",
                    "submitted_at", "code")
    list_filter = ("study", "status")
    search_fields = ("participant__external_id", "platform_assignment_id")
    readonly_fields = ("study", "participant", "status", "token", "platform_assignment_id", "platform_task_id", "return_url",
                       "completion_code", "consented_at", "created_at", "expires_at", "submitted_at", "reviewed_at",
                       "ended_as_impostor")
    fields = readonly_fields
    inlines = [ClaimInline]
    list_select_related = ("study", "participant")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        # Nothing to edit; saving the page would write the whole row back, undoing a status a
        # review, an expiry or a withdrawal moved meanwhile.
        return False

    def has_delete_permission(self, request, obj=None):
        # A task's end goes through the services (expiry, return, review, withdrawal), which give
        # its units back and keep the payments' link to it; deleting it here would do neither.
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            _n_claims=Count("claims"), _n_completed=Count("claims", filter=Q(claims__completed_at__isnull=False))
        )

    @admin.display(description="Questions", ordering="_n_claims")
    def n_claims(self, obj) -> int:
        return obj._n_claims

    @admin.display(description="Answered", ordering="_n_completed")
    def n_completed(self, obj) -> int:
        return obj._n_completed


@admin.register(Claim)
class ClaimAdmin(ReadOnlyMixin, StudyScopedAdmin):
    list_display = ("id", "assignment", "position", "question_key", "unit", "attention_check", "completed_at",
                    "released")
    list_filter = ("study", "released")
    inlines = [AnnotationInline]
    list_select_related = ("assignment", "unit", "attention_check")


class ServiceDeleteAdmin(StudyScopedAdmin):
    """An admin whose rows are deleted through a service that checks the user and its rule at the
    delete (``delete_model``/``delete_queryset``), after the page was read: a refusal then
    (``delete_refusals``) rolls the page's transaction back, nothing is deleted, and the row's page
    (the list, for "Delete selected", all the chosen rows or none) says why, never a 500."""

    delete_refusals: tuple[type[Exception], ...] = ()

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except self.delete_refusals as exc:
            self.message_user(request, f"Nothing deleted: {exc}", messages.ERROR)
            opts = self.model._meta
            return HttpResponseRedirect(reverse(f"admin:{opts.app_label}_{opts.model_name}_change",
                                                args=[object_id], current_app=self.admin_site.name))

    def changelist_view(self, request, extra_context=None):
        if request.method != "POST":
            return super().changelist_view(request, extra_context)
        try:
            with transaction.atomic():
                return super().changelist_view(request, extra_context)
        except self.delete_refusals as exc:
            self.message_user(request, f"Nothing deleted: {exc}", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())


@admin.register(AttentionCheck)
class AttentionCheckAdmin(ServiceDeleteAdmin):
    """A check is changed or deleted only until a worker of its study has been given one
    (``attention_checks_fixed``), as on the study page; its study never changes."""

    list_display = ("id", "study", "question", "correct_answer")
    list_filter = ("study",)
    delete_refusals = (AttentionCheckRefused,)

    def get_readonly_fields(self, request, obj=None):
        return ("study",) if obj is not None else ()

    def has_change_permission(self, request, obj=None):
        return not (obj is not None and attention_checks_fixed(obj.study)) and super().has_change_permission(
            request, obj)

    def has_delete_permission(self, request, obj=None):
        return not (obj is not None and attention_checks_fixed(obj.study)) and super().has_delete_permission(
            request, obj)

    # Written through the services, which check the user and the fixed rule themselves.
    def save_model(self, request, obj, form, change):
        attention_check_save(check=obj, user=request.user)

    def delete_model(self, request, obj):
        attention_check_delete(check=obj, user=request.user)

    def delete_queryset(self, request, queryset):
        for check in queryset:
            attention_check_delete(check=check, user=request.user)


class QualificationQuestionFormSet(BaseInlineFormSet):
    """The test's questions as the page leaves them, judged with the pass mark its form gives by the
    service's rule (``qualification_test_problem``, which ``qualification_test_save`` applies when
    it writes them): a test no worker can pass is refused on this page, and nothing is saved."""

    def questions(self) -> list[dict]:
        """The questions kept (those marked for deletion and the empty extra rows left out), in their
        order, as ``qualification_questions_set`` takes them. Call once the formset is cleaned."""
        kept = [(form.instance.position, number, form.instance) for number, form in enumerate(self.forms)
                if form.cleaned_data and not (self.can_delete and self._should_delete_form(form))]
        return [{"question": q.question, "choices": list(q.choices or []), "correct_answer": q.correct_answer}
                for _, _, q in sorted(kept, key=lambda row: row[:2])]

    def clean(self):
        super().clean()
        if any(self.errors):
            return  # each question's own errors first
        problem = qualification_test_problem(pass_mark=self.instance.pass_mark, question_count=len(self.questions()))
        if problem is not None:
            raise ValidationError(problem[1])


class QualificationQuestionInline(admin.TabularInline):
    """The test's questions, editable until a worker has taken the test: then they are fixed, as
    ``qualification_questions_set`` (the study page's path) refuses to change them. They are written
    with the test by ``qualification_test_save`` (``QualificationTestAdmin.save_related``)."""

    model = QualificationQuestion
    formset = QualificationQuestionFormSet
    extra = 1

    def _taken(self, obj) -> bool:
        return obj is not None and obj.pk is not None and qualification_test_taken(obj)

    def has_add_permission(self, request, obj=None):
        return not self._taken(obj) and super().has_add_permission(request, obj)

    def has_change_permission(self, request, obj=None):
        return not self._taken(obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return not self._taken(obj) and super().has_delete_permission(request, obj)


@admin.register(QualificationTest)
class QualificationTestAdmin(ServiceDeleteAdmin):
    """Its study never changes; once a worker has taken it, nothing of it changes and it is not
    deleted (``qualification_test_taken``), as on the study page."""

    list_display = ("id", "study", "pass_mark")
    inlines = [QualificationQuestionInline]
    # A worker took the test, or the user's rights on the study went, since the page was read.
    delete_refusals = (QualificationSetupError, QualificationTestRefused)

    def get_readonly_fields(self, request, obj=None):
        return ("study",) if obj is not None else ()

    def has_change_permission(self, request, obj=None):
        return not (obj is not None and qualification_test_taken(obj)) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return not (obj is not None and qualification_test_taken(obj)) and super().has_delete_permission(request, obj)

    def get_form(self, request, obj=None, change=False, **kwargs):
        """The test's form; for a user who may not see its questions (no inline, so no
        ``QualificationQuestionFormSet`` to judge them), it judges the pass mark against the stored
        questions by the service's rule (``qualification_test_problem``), so a test no worker can pass
        is refused on the page, as for those who see them."""
        form = super().get_form(request, obj, change=change, **kwargs)
        if any(isinstance(inline, QualificationQuestionInline) for inline in self.get_inline_instances(request, obj)):
            return form

        class StoredQuestionsForm(form):
            def clean(self):
                cleaned = super().clean()
                stored = self.instance.questions.count() if self.instance.pk is not None else 0
                problem = qualification_test_problem(pass_mark=cleaned.get("pass_mark"), question_count=stored)
                if problem is not None:
                    self.add_error("pass_mark" if problem[0] == "pass_mark" else None, problem[1])
                return cleaned

        StoredQuestionsForm.__name__ = form.__name__
        return StoredQuestionsForm

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        # A refusal of the service at save time (a worker took the test, or the user's rights on the
        # study went, since the page was read): the page's transaction is rolled back, nothing is saved,
        # and the page says why.
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except (QualificationSetupError, QualificationTestRefused) as exc:
            self.message_user(request, f"Nothing saved: {exc}", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    # Deleted through the service, which checks the user and the fixed rule under the study's lock.
    def delete_model(self, request, obj):
        qualification_test_delete(test=obj, user=request.user)

    def delete_queryset(self, request, queryset):
        for test in queryset:
            qualification_test_delete(test=test, user=request.user)

    def save_model(self, request, obj, form, change):
        pass  # saved with its questions, in save_related

    def save_related(self, request, form, formsets, change):
        # The test and its questions in one call of the service, which checks them together (at least one
        # question, a pass mark they can reach) beside the write; a new test also holds the study's tasks
        # in progress until their workers pass it (in the page's transaction). The question formset
        # (absent for a user who may not see the questions: the stored ones are judged) is saved without
        # writing, only to name its changes in the page's history.
        questions = next((f for f in formsets if isinstance(f, QualificationQuestionFormSet)), None)
        qualification_test_save(test=form.instance, user=request.user,
                                questions=questions.questions() if questions is not None else None)
        form.save_m2m()
        for formset in formsets:
            if formset is questions:
                formset.save(commit=False)
            else:
                self.save_formset(request, form, formset, change=change)


@admin.register(ConsentReceipt)
class ConsentReceiptAdmin(ReadOnlyMixin, StudyScopedAdmin):
    """Each consent form a worker sent (``services.entry.consent_take``): who (by pseudonym), when,
    the task it gave, and the SHA-256 of the consent text they agreed to, which the study page's
    text (fixed once the study opens) can be checked against: what an ethics review asks to see."""

    list_display = ("id", "study", "participant", "created_at", "assignment", "consent_sha256", "agreed_to_current")
    list_filter = ("study",)
    list_select_related = ("study", "participant", "assignment")
    readonly_fields = ("study", "participant", "assignment", "consent_sha256", "agreed_to_current", "created_at")
    exclude = ("key",)  # the form's one-time nonce: of no use to a reader

    @admin.display(description="agreed to the study's consent text as it reads now", boolean=True)
    def agreed_to_current(self, obj: ConsentReceipt) -> bool | None:
        if not obj.consent_sha256:
            return None  # a receipt from before the hash was recorded
        return obj.consent_sha256 == consent_text_sha256(obj.study)


@admin.register(QualificationGrant)
class QualificationGrantAdmin(ReadOnlyMixin, StudyScopedAdmin):
    """A worker's qualification test: the latest attempt graded, and the failed attempts set aside
    before it (``voids``: taken again from a browser whose study cookie did not name their task, under
    an MTurk worker id or a typed identifier; ``impostor.grant_retake_start``), so the researcher sees
    every attempt, not only the last."""

    list_display = ("id", "study", "participant", "passed", "score", "attempts_set_aside", "created_at")
    list_filter = ("study", "passed")
    readonly_fields = ("study", "participant", "assignment", "passed", "score", "answers", "created_at",
                       "attempts_set_aside", "voids")

    @admin.display(description="failed attempts set aside")
    def attempts_set_aside(self, obj: QualificationGrant) -> int:
        return len(obj.voids or ())
