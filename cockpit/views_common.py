"""What every cockpit page does first: find the study the user may reach, or answer 404 / 403.

Reach comes from the one per-study access definition (``studies.selectors.studies_for_user``):
a study outside it answers 404 (as if it did not exist); Django's model permissions still apply
on top (403)."""
from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404
from django.urls import reverse

from annotations.services.platforms.access import study_imported
from cockpit.imported import IMPORTED_LINKS, export_scores_url
from scoring.selectors import score_run_latest
from studies.models import Study
from studies.selectors import PAY, VIEW, studies_for_user

ACCESS_REFUSED = {
    PAY: "Reviewing and paying need the permission to pay workers of this study (studies.pay_workers).",
}


def study_for(request, study_id: int, *, access: str = VIEW) -> Study:
    """The study ``study_id`` if ``request.user`` may see it (404 otherwise), checked for
    ``access`` on top (403 when seeing is allowed but ``access`` is not)."""
    if not request.user.has_perm("studies.view_study") and not request.user.has_perm("studies.change_study"):
        raise PermissionDenied
    study = get_object_or_404(studies_for_user(user=request.user, access=VIEW), pk=study_id)
    if access != VIEW and not studies_for_user(user=request.user, access=access).filter(pk=study.pk).exists():
        raise PermissionDenied(ACCESS_REFUSED.get(access, "You may not change this study."))
    return study


def study_links(study: Study) -> list[tuple[str, str, str]]:
    """(key, label, url) of every page about ``study``: the study page's buttons and the bar at
    the top of each cockpit page. The latest report is there once a scoring run finished."""
    run = score_run_latest(study=study)
    links = [
        ("study", "Study page", reverse("admin:studies_study_change", args=[study.pk])),
        ("progress", "Progress", reverse("admin:studies_study_progress", args=[study.pk])),
        ("workers", "Workers", reverse("admin:studies_study_workers", args=[study.pk])),
        ("answers", "Answers", reverse("admin:annotations_annotation_changelist") + f"?claim__study__id__exact={study.pk}"),
        ("flags", "Flagged questions",
         reverse("admin:annotations_flaggedanswer_changelist") + f"?claim__study__id__exact={study.pk}"),
        ("publish", "Publish and pay", reverse("admin:annotations_publication_publish", args=[study.pk])),
        ("publications", "Publications",
         reverse("admin:annotations_publication_changelist") + f"?study__id__exact={study.pk}"),
        ("score_runs", "Score runs", reverse("admin:scoring_scorerun_changelist") + f"?study__id__exact={study.pk}"),
        ("report", "Latest report", reverse("admin:scoring_scorerun_report", args=[run.pk]) if run else ""),
    ]
    if study.is_imported_outcome:  # run elsewhere: nothing to watch, review, publish or pay
        links = [link for link in links if link[0] in IMPORTED_LINKS]
        links.append(("export_scores", "Export scores (CSV)", export_scores_url(study)))
    elif study_imported(study):  # a bundle's copy: its answers to read, no worker here to publish to or pay
        links = [link for link in links if link[0] != "publish"]
    links.append(("bundle", "Download the bundle (zip)", reverse("admin:studies_study_bundle", args=[study.pk])))
    return links


def study_context(admin_site, request, study: Study, title: str) -> dict:
    """The context every cockpit page of one study starts from (admin chrome, breadcrumbs, the
    links to the study's other pages)."""
    return {
        **admin_site.each_context(request),
        "title": title,
        "study": study,
        "opts": Study._meta,
        "study_url": reverse("admin:studies_study_change", args=[study.pk]),
        "study_nav": study_links(study),
    }
