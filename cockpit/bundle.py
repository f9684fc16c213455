"""The study bundle in the admin: the study page's "Download the bundle" button
(``/admin/studies/study/<id>/bundle/``, streamed, for anyone who may see the study: the API's
rule) and the studies list's "Import a study bundle" page (``/admin/studies/study/import-bundle/``,
for users with ``studies.add_study``). The work is ``scoring.services.bundle``."""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse

from cockpit.views_common import study_for
from scoring.services.bundle import BundleError, bundle_filename, bundle_import, bundle_stream
from studies.models import Study


class BundleImportForm(forms.Form):
    file = forms.FileField(label="Bundle (.zip)", help_text="A study bundle downloaded from a study page or the API.")
    name = forms.CharField(max_length=200, label="New study's name")


def bundle_download_view(request, study_id: int):
    study = study_for(request, study_id)
    response = StreamingHttpResponse(bundle_stream(study=study, user=request.user), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{bundle_filename(study)}"'
    return response


def bundle_import_view(model_admin, request):
    if not request.user.has_perm("studies.add_study"):
        raise PermissionDenied("You need the permission to add studies to import one.")
    form = BundleImportForm(request.POST or None, request.FILES or None)
    errors = None
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            study = bundle_import(file=upload, name=form.cleaned_data["name"], owner=request.user,
                                  filename=upload.name)
        except BundleError as exc:
            errors = exc
        else:
            messages.success(request, f"Imported {study.name!r} (closed). Score it to re-compute its results.json.")
            return HttpResponseRedirect(reverse("admin:studies_study_change", args=[study.pk]))
    context = {**model_admin.admin_site.each_context(request), "title": "Import a study bundle", "opts": Study._meta,
               "form": form, "errors": errors}
    return TemplateResponse(request, "cockpit/study/import_bundle.html", context)


def urls(model_admin) -> list:
    view = model_admin.admin_site.admin_view
    return [
        path("<int:study_id>/bundle/", view(bundle_download_view), name="studies_study_bundle"),
        path("import-bundle/", view(lambda request: bundle_import_view(model_admin, request)),
             name="studies_study_import_bundle"),
    ]
