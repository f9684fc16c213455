"""The researcher's cockpit: the study admin, where the three apps meet.

``studies`` owns the design, ``annotations`` the work and the platforms, ``scoring`` the results;
none of them may import a higher one. This app sits above all three and composes them for the
researcher: the study page shows the design, and (as the apps grow) its progress, publications
and results, with the actions that run a study."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from annotations.platforms.mturk import mturk_closed_reason
from annotations.selectors.cost import study_collects, study_cost_and_pay
from annotations.selectors.entry import study_entry_warnings
from annotations.selectors.progress import studies_completion
from annotations.services.opening import study_open
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.close import study_close
from cockpit import bundle, copying, precision, progress_page, workers
from cockpit.imported import bundle_scores_origin, imported_origin, imported_table
from cockpit.study_setup import AttentionCheckInline, QualificationTestInline, SourcesPicker
from cockpit.views_common import study_links
from scoring.services.runs import ScoreRunRefused, score_run_check
from studies.admin.scoping import StudyScopedAdmin
from studies.admin.sharing import StudyShareInline
from studies.models import Dataset, Platform, Study
from studies.selectors import (
    CHANGE,
    datasets_for_user,
    source_coverage,
    sources_for_user,
    sources_without_rationales,
    studies_for_user,
    study_design_summary,
)
from studies.services.studies import (
    DESIGN_FIELDS,
    TASK_MINUTES_FIELDS,
    StudyError,
    study_delete,
    study_delete_check,
    study_design_problems,
    study_fixed_fields,
    study_fixed_reason,
    study_insert,
    study_owner_or_superuser,
    study_reference_problems,
    study_sample_items,
    study_update,
)


class StudyForm(forms.ModelForm):
    # Who saves it (StudyAdmin.get_form names the request's user): the reference data they may use in
    # a design is checked beside each field, as study_insert and study_update refuse it.
    acting_user = AnonymousUser()

    class Meta:
        model = Study
        exclude = ["items", "status", "is_imported_outcome"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "sources" in self.fields:
            field = self.fields["sources"]
            # The datasets the form offers (the user's); a fixed dataset is the study's own.
            datasets = (self.fields["dataset"].queryset if "dataset" in self.fields
                        else Dataset.objects.filter(pk=self.instance.dataset_id))
            coverage = source_coverage(sources=field.queryset, datasets=datasets)
            field.widget = SourcesPicker(coverage=coverage, choices=field.choices)
            field.help_text = ("Only sources with rationales for the chosen dataset and split are offered "
                               "(import rationales to add one).")
        if "consent_text" in self.fields and "consent_text" in study_fixed_fields(study=self.instance):
            # Read-only once fixed (``study_locked_changes``): the form keeps the stored text, byte for
            # byte (not stripped), whatever is posted. Editable, a browser would send it back with its
            # own line breaks (CRLF) and trimmed, which would read as a change to the text the workers
            # agreed to.
            field = self.fields["consent_text"]
            field.disabled, field.strip = True, False
            field.help_text = study_fixed_reason(study=self.instance, field="consent_text")

    def clean(self):
        data = super().clean()
        # The service's rules (study_insert and study_update refuse the same design), each shown
        # beside its field. The instance still holds the stored values here (the form writes to
        # it after clean()), so the rules compare the form's values with them.
        changes = {f: data[f] for f in DESIGN_FIELDS if f in data}
        problems = study_design_problems(study=self.instance, changes=changes, sources=data.get("sources"))
        if not problems:
            problems = study_reference_problems(study=self.instance, user=self.acting_user, changes=changes,
                                               sources=data.get("sources"))
        for field, reason in problems.items():
            self.add_error(field if field in self.fields else None, reason)
        if "sources" not in problems:
            self._refuse_sources_without_rationales(data)
        return data

    def _refuse_sources_without_rationales(self, data):
        """The server side of the sources picker, which offers only sources with rationales for the
        chosen dataset and split: one chosen now without any is refused here (a study's own sources
        stay: imported outcomes may have none). Services accept such a source (its units wait for
        rationales; the design summary counts the missing ones)."""
        dataset, split, sources = data.get("dataset"), data.get("split"), data.get("sources")
        if not sources or dataset is None or not split:
            return
        kept = set(self.instance.sources.all()) if self.instance.pk else set()
        missing = sources_without_rationales(sources=[s for s in sources if s not in kept], dataset=dataset,
                                             split=split)
        if missing:
            self.add_error("sources", f"No rationales for {dataset} ({split}) from: "
                                      f"{', '.join(s.name for s in missing)}. Import them or choose other sources.")


def design_table(summary, cost, *, extra_warnings: list[str] = ()) -> str:
    """The design (``studies.selectors.study_design_summary``) and what it costs and pays (the one
    cost-and-pay reading, ``annotations.selectors.cost.study_cost_and_pay``, that the publish page,
    the API and ``publish_study`` quote too)."""
    s, e, pay = summary, cost.estimate, cost.pay
    rows = [
        ("Items", f"{s.items:,}"),
        ("Rationale sources", f"{s.sources:,}"),
        ("Units", f"{s.units:,}"),
        ("Workers per unit", f"{s.annotators_per_unit:,}"),
        ("Answers to collect", f"{s.answers:,}" + (" at most: a unit stops when its result is decided"
                                                    if s.stop_when_decided else "")),
        ("Units per task", f"{s.units_per_task:,}" if s.largest_task >= s.units_per_task or not s.units
         else f"{s.units_per_task:,} (a task holds at most {s.largest_task:,})"),
        ("Tasks", f"{s.tasks:,}"),
        ("Minutes per task (estimate)", f"{s.minutes_per_task}"),
        ("Worker hours (estimate)", f"{s.worker_hours}"),
        ("Pay to workers", f"{e.rewards:,} {e.currency} ({e.reward_per_task} × {e.n_tasks:,} tasks)"),
        ("Platform fee", f"{e.fees:,} {e.currency} ({e.fee_rate * 100:.2f}% on {e.platform})"),
        ("Total cost", f"{e.total:,} {e.currency}"),
        ("Effective hourly pay", f"{pay.figure}/h (floor {pay.floor}/h): {pay.text}" if pay.figure is not None else "—"),
    ]
    body = format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows)
    # The design's warnings and the cost reading's share the capacity warning: say it once.
    all_warnings = list(dict.fromkeys([*s.warnings, *cost.warnings, *extra_warnings]))
    warnings = format_html_join("", '<li class="warning">{}</li>', ((w,) for w in all_warnings))
    if all_warnings:
        return format_html(
            '<table class="rl-design">{}</table><ul class="messagelist rl-design-warnings">{}</ul>', body, warnings
        )
    return format_html('<table class="rl-design">{}</table>', body)


def mturk_closed_warning(study: Study) -> str:
    """The study page's warning for a draft that names MTurk while Amazon's closure holds
    (``annotations.platforms.mturk.mturk_closed_reason``, the one rule): it could never be
    published there (``study_publish`` refuses it before opening). "" otherwise: a study already
    open or closed on MTurk is being wound down, which goes on."""
    if study.platform != Platform.MTURK or study.status != Study.Status.DRAFT:
        return ""
    reason = mturk_closed_reason()
    return f"This study's platform is MTurk, where it cannot be published: {reason}." if reason else ""


class StudyChangeList(ChangeList):
    """The study list, with each shown study's completion read in one go."""

    def get_results(self, request):
        super().get_results(request)
        completion = studies_completion(studies=self.result_list)
        for study in self.result_list:
            study._completion = completion.get(study.pk)


def completion_html(completion) -> str:
    if completion is None or not completion.to_collect:
        return "—"
    return format_html(
        '<progress value="{}" max="{}" style="width:6em"></progress> {}% <span class="help">({} / {})</span>',
        completion.collected, completion.to_collect, f"{completion.percent:.0f}",
        f"{completion.collected:,}", f"{completion.to_collect:,}",
    )


@admin.register(Study)
class StudyAdmin(StudyScopedAdmin):
    study_path = "pk"
    form = StudyForm
    change_form_template = "cockpit/study/change_form.html"
    change_list_template = "cockpit/study/change_list.html"
    list_display = ["name", "kind", "status", "completion", "dataset", "split", "n_items", "n_sources", "platform",
                    "created_at"]
    list_filter = ["kind", "status", "platform", "dataset"]
    search_fields = ["name", "instructions"]
    autocomplete_fields = ["owner"]
    inlines = [AttentionCheckInline, QualificationTestInline, StudyShareInline]
    # The tasks' minutes (``TASK_MINUTES_FIELDS``) are shown, never taken: opening fixes them.
    readonly_fields = ["status", "progress_at_a_glance", "design_at_a_glance", "created_at", "updated_at",
                       *TASK_MINUTES_FIELDS]
    actions = ["resample_items", "open_studies", "close_studies"]
    fieldsets = [
        (None, {"fields": ["name", "kind", "status", "progress_at_a_glance", "design_at_a_glance"]}),
        ("Items and sources", {"fields": ["dataset", "split", "item_sample_size", "sample_seed", "sources"]}),
        ("Design and pay", {"fields": [
            "annotators_per_unit", "stop_when_decided", "units_per_task", "reward", "hourly_pay_floor",
            "estimated_minutes_per_task", "platform", *TASK_MINUTES_FIELDS,
        ]}),
        ("What workers read", {"fields": ["consent_text", "instructions", "example"], "classes": ["collapse"]}),
        ("Other", {"fields": ["faithfulness_enabled", "owner", "created_at", "updated_at"],
                   "classes": ["collapse"]}),
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("dataset").annotate(
            _items=Count("items", distinct=True), _sources=Count("sources", distinct=True)
        )

    def get_changelist(self, request, **kwargs):
        return StudyChangeList

    def get_readonly_fields(self, request, obj=None):
        """Only a study's owner (or a superuser) hands it to someone else: taking ownership would
        let a researcher it is shared with raise their own share (``studies.services.sharing``). A
        new study is its maker's: only a superuser chooses another owner (``study_insert``)."""
        fields = list(super().get_readonly_fields(request, obj))
        if not (request.user.is_superuser if obj is None else study_owner_or_superuser(study=obj, user=request.user)):
            fields.append("owner")
        return fields

    def get_form(self, request, obj=None, change=False, **kwargs):
        # Each request's form names its user (never a shared class attribute).
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"acting_user": request.user})

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        # The datasets and sources the user may see, as the API offers and the services accept.
        if db_field.name == "dataset":
            kwargs["queryset"] = datasets_for_user(user=request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "sources":
            kwargs["queryset"] = sources_for_user(user=request.user)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def has_delete_permission(self, request, obj=None):
        """Deleting a study is its owner's (or a superuser's), as ``study_delete`` decides: a share,
        even CHANGE, does not grant it."""
        if not super().has_delete_permission(request, obj):
            return False
        if obj is None:
            return True
        try:
            study_delete_check(study=obj, user=request.user)
        except StudyError:
            return False
        return True

    def delete_model(self, request, obj):
        try:
            study_delete(study=obj, user=request.user)
        except StudyError as exc:
            raise PermissionDenied(str(exc)) from exc

    def delete_queryset(self, request, queryset):
        try:
            with transaction.atomic():
                for study in queryset:
                    study_delete(study=study, user=request.user)
        except StudyError as exc:
            raise PermissionDenied(str(exc)) from exc

    def get_urls(self):
        return (progress_page.urls(self) + workers.urls(self) + precision.urls(self) + bundle.urls(self)
                + copying.urls(self) + super().get_urls())

    def change_view(self, request, object_id, form_url="", extra_context=None):
        study = self.get_object(request, object_id)
        links = study_links(study) if study is not None else []
        extra_context = {**(extra_context or {}), "study_links": links,
                         "can_score": study is not None and _may_score(study=study, user=request.user),
                         "can_copy": copying.may_copy(study=study, user=request.user)}
        return super().change_view(request, object_id, form_url, extra_context=extra_context)

    @admin.display(description="answers collected")
    def completion(self, obj):
        return completion_html(getattr(obj, "_completion", None))

    @admin.display(description="Progress")
    def progress_at_a_glance(self, obj):
        if obj is None or not obj.pk:
            return "—"
        if obj.is_imported_outcome:
            return imported_origin(obj)
        done = studies_completion(studies=[obj])[obj.pk]
        if not done.to_collect:
            return "No units yet: the study collects answers once it is open."
        scores_origin = bundle_scores_origin(obj)  # a bundle's copy: where the scores it carries came from
        return format_html('{} <a href="{}" id="progress-link">Watch it fill (live)</a>{}', completion_html(done),
                           reverse("admin:studies_study_progress", args=[obj.pk]),
                           format_html('<p id="bundle-scores-origin">{}</p>', scores_origin) if scores_origin else "")

    @admin.display(description="items", ordering="_items")
    def n_items(self, obj):
        return obj._items

    @admin.display(description="sources", ordering="_sources")
    def n_sources(self, obj):
        return obj._sources

    @admin.display(description="Design at a glance")
    def design_at_a_glance(self, obj):
        if obj is None or not obj.pk:
            return "Shown once the study is saved."
        # What is saved: after a refused save ``obj`` carries the form's unsaved values.
        saved = Study.objects.get(pk=obj.pk)
        if saved.is_imported_outcome:
            return imported_table(saved)
        # One count of what the study collects, the cost reading's (an open study's built units).
        table = design_table(study_design_summary(study=saved, collects=study_collects(study=saved)),
                             study_cost_and_pay(study=saved),
                             extra_warnings=[*study_entry_warnings(study=saved),
                                             *filter(None, [mturk_closed_warning(saved)])])
        return format_html("{}{}", table, mark_safe(precision.precision_html(study=saved)))  # noqa: S308 (rendered template)

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        fields = {f: data[f] for f in DESIGN_FIELDS if f in data}
        sources = data.get("sources")
        try:
            if not change:
                # obj is the form's unsaved study, holding the design; the service saves it (an
                # empty owner becomes the user).
                study_insert(study=obj, sources=sources or [], user=request.user)
            else:
                # obj already carries the form's values; the service compares with the stored row.
                study_update(study=Study.objects.get(pk=obj.pk), user=request.user, sources=sources, **fields)
        except StudyError as exc:
            # The form's clean() catches the usual cases; this is a race with another edit.
            raise PermissionDenied(str(exc)) from exc
        closed = mturk_closed_warning(Study.objects.get(pk=obj.pk))
        if closed:
            self.message_user(request, closed, messages.WARNING)

    def save_related(self, request, form, formsets, change):
        # Sources were set by the service; the inlines (shares through study_share) save here.
        form.cleaned_data.pop("sources", None)
        super().save_related(request, form, formsets, change)

    def _each(self, request, queryset, service, verb, **kwargs):
        done, failed = 0, []
        # Each service checks the user's right itself; this reads the same selector first, so a
        # study the user may not change is named in one message and not tried.
        allowed = set(studies_for_user(user=request.user, access=CHANGE).values_list("pk", flat=True))
        for study in queryset:
            if study.pk not in allowed:
                failed.append(f"{study.name}: you may not change this study (studies.change_study on a study "
                              "you own or that is shared with you).")
                continue
            try:
                service(study=study, **kwargs)
                done += 1
            except (StudyError, PlatformServiceError) as exc:
                failed.append(f"{study.name}: {exc}")
        if done:
            self.message_user(request, f"{done} stud{'y' if done == 1 else 'ies'} {verb}.", messages.SUCCESS)
        for msg in failed:
            self.message_user(request, msg, messages.ERROR)

    @admin.action(description="Draw the item sample again (drafts only)")
    def resample_items(self, request, queryset):
        self._each(request, queryset, study_sample_items, "re-sampled", user=request.user)

    @admin.action(description="Open selected studies to workers (builds their units)")
    def open_studies(self, request, queryset):
        self._each(request, queryset, study_open, "opened", user=request.user)

    @admin.action(description="Close selected studies (stops recruiting on their platform: HITs expired, "
                              "Prolific study stopped, links closed)")
    def close_studies(self, request, queryset):
        self._each(request, queryset, study_close, "closed", user=request.user)


def _may_score(*, study: Study, user) -> bool:
    """Whether the study page offers "Score again": the service's own answer (``score_run_check``)."""
    try:
        score_run_check(study=study, user=user)
    except ScoreRunRefused:
        return False
    return True
