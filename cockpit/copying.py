"""The study page's "Copy this study" (``/admin/studies/study/<id>/copy/``): a form asking the
copy's name (offered: "<name> (copy)", made unique) and platform (the study's, or another; never a
closed one first, MTurk after Amazon's closure, whose reason the form shows), for
anyone who may see the study and add studies. The work, and every check, is
``annotations.services.copying.study_copy``; the page shows its refusal beside the field it names,
and sends the researcher to the new draft."""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from annotations.services.copying import copy_platform_closed_reason, study_copy, study_copy_name
from cockpit.views_common import study_context, study_for
from studies.models import Platform, Study
from studies.services.studies import StudyError

COPY_PERMISSION = "studies.add_study"


def may_copy(*, study: Study, user) -> bool:
    """Whether the study page offers "Copy this study": the user may add studies and the study has a
    design (not imported outcomes). The service decides the rest (the dataset and sources, the checks)."""
    return study is not None and not study.is_imported_outcome and user.has_perm(COPY_PERMISSION)


class StudyCopyForm(forms.Form):
    name = forms.CharField(max_length=Study._meta.get_field("name").max_length, label="New study's name")
    platform = forms.ChoiceField(choices=Platform.choices, label="Platform",
                                 help_text="Where the copy runs; the study's own unless you choose another (a closed "
                                           "platform is refused).")


def copy_view(model_admin, request, study_id: int):
    study = study_for(request, study_id)
    if not request.user.has_perm(COPY_PERMISSION):
        raise PermissionDenied("You need the permission to add studies (studies.add_study) to copy one.")
    # The publish page's link to copy a study to run it elsewhere names that platform (?platform=).
    asked = request.GET.get("platform", "")
    offered = [p for p in (asked, study.platform) if p in Platform.values]
    # Never a closed platform first (MTurk after Amazon's closure): the copy is there to run elsewhere.
    # Its reason is shown on the form, and choosing it anyway is refused beside the field.
    initial = next((p for p in offered if not copy_platform_closed_reason(p)), Platform.LINK)
    closed = next((f"{Platform(p).label} is closed, so a copy could never be published there: "
                   f"{copy_platform_closed_reason(p)}. The copy is offered on {Platform(initial).label} instead: "
                   "choose where it runs." for p in offered if copy_platform_closed_reason(p)), "")
    form = StudyCopyForm(request.POST or None, initial={"name": study_copy_name(study=study), "platform": initial})
    error = ""
    if request.method == "POST" and form.is_valid():
        try:
            copy = study_copy(study=study, user=request.user, name=form.cleaned_data["name"],
                              platform=form.cleaned_data["platform"])
        except StudyError as exc:
            for field, reason in exc.problems.items():
                form.add_error(field if field in form.fields else None, reason)
            if not exc.problems:
                error = str(exc)
        else:
            messages.success(request, f"Copied {study.name!r} to the draft {copy.name!r}: its design, attention "
                                      "checks and qualification test. Check it, then open it.")
            return HttpResponseRedirect(reverse("admin:studies_study_change", args=[copy.pk]))
    context = {**study_context(model_admin.admin_site, request, study, f"Copy {study.name}"),
               "form": form, "error": error, "platform_closed": closed}
    return TemplateResponse(request, "cockpit/study/copy.html", context)


def urls(model_admin) -> list:
    view = model_admin.admin_site.admin_view
    return [
        path("<int:study_id>/copy/", view(lambda request, study_id: copy_view(model_admin, request, study_id)),
             name="studies_study_copy"),
    ]
