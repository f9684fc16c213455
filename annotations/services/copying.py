"""Copying a study: a new draft with the same design, to run a study again (a closed study never
opens again), on another platform, or with other terms (what a study no longer a draft fixes:
``studies.services.studies.LOCKED_FIELDS``). The refusals that say "copy the study" point here;
the study page's "Copy this study" (``cockpit.copying``) calls ``study_copy``.

Here, not in ``studies``, because a study's design includes its attention checks and
qualification test, which are ``annotations``' models."""
from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from annotations.models import AttentionCheck, QualificationTest
from annotations.platforms.mturk import mturk_closed_reason
from annotations.services.qualification import (
    AttentionCheckRefused,
    QualificationSetupError,
    QualificationTestRefused,
    attention_check_save,
    qualification_questions,
    qualification_test_save,
)
from studies.models import Platform, Study
from studies.selectors import VIEW, studies_for_user
from studies.services.studies import StudyError, study_add_check, study_create

# The fields of a study's design a copy carries, as they are (``platform`` unless another is given).
COPIED_FIELDS = (
    "kind", "dataset", "split", "item_sample_size", "sample_seed", "annotators_per_unit", "units_per_task",
    "reward", "hourly_pay_floor", "estimated_minutes_per_task", "platform", "consent_text", "instructions",
    "example", "faithfulness_enabled", "stop_when_decided",
)
# What a copy never carries: its own name, owner (the user who copies) and status (a draft); new
# public ids (``entry_token``, ``completion_code``: made with the row, as for any new study); no
# tasks' minutes (fixed when the copy opens); no shares; and never whether outcomes were imported
# (such a study is refused). Its units, tasks, answers, grants, blocks, receipts, publications and
# links are rows of their own, never copied. Its items and sources are copied (``study_copy``).
NOT_COPIED_FIELDS = (
    "id", "name", "owner", "status", "created_at", "updated_at", "entry_token", "completion_code",
    "assignment_minutes", "first_answer_minutes", "shared_with", "is_imported_outcome", "items", "sources",
)
COPY_SUFFIX = " (copy)"


def study_copy_name(*, study: Study) -> str:
    """The name the study page offers a copy of ``study``: "<name> (copy)", else "<name> (copy 2)",
    "(copy 3)", ... the first no study has, the name shortened to fit the field."""
    limit = Study._meta.get_field("name").max_length
    number = 1
    while True:
        suffix = COPY_SUFFIX if number == 1 else f" (copy {number})"
        name = study.name[: limit - len(suffix)] + suffix
        if not Study.objects.filter(name=name).exists():
            return name
        number += 1


def _refuse_name(name: str) -> None:
    reason = f"A study named {name!r} exists already: choose another name for the copy."
    raise StudyError(f"name: {reason}", {"name": reason})


def copy_platform_closed_reason(platform: str) -> str:
    """Why a copy cannot be made to run on ``platform``, "" when it can: MTurk while Amazon's
    closure holds (``annotations.platforms.mturk.mturk_closed_reason``, the one rule), where a new
    draft could never be published. The copy page neither offers it first nor lets it be chosen."""
    return mturk_closed_reason() if platform == Platform.MTURK else ""


def _refuse_closed(platform: str) -> None:
    closed = copy_platform_closed_reason(platform)
    if closed:
        reason = (f"{Platform(platform).label} is closed, so a copy could never be published there: {closed}. "
                  "Choose another platform for the copy.")
        raise StudyError(f"platform: {reason}", {"platform": reason})


def study_copy(*, study: Study, user, name: str, platform: str | None = None) -> Study:
    """A new draft study named ``name``, owned by ``user`` (None: the operator, whose copy has no
    owner), with ``study``'s design: every field of ``COPIED_FIELDS`` (``platform`` replaced by the
    one given), its sources, its items (exactly those ``study`` shows, not drawn again, though its
    split has changed since or its items were chosen otherwise, e.g. a bundle's copy; a draft with
    no items yet: the copy draws its sample as any new study does), its attention checks and its
    qualification test with its questions. A platform that is closed (MTurk after Amazon's closure,
    ``copy_platform_closed_reason``), given or ``study``'s own, is refused with the reason: a copy
    there could never be published. Nothing of its run is copied: units,
    tasks, answers, grants, blocks, receipts, publications, links, shares; the copy has new public
    ids (entry token, completion code) and no tasks' minutes (set when it opens).

    Made through the paths that make each part, with their checks: the study through
    ``study_create`` (``studies.add_study``, the dataset and sources must be ones ``user`` may use in
    a design, the design rules, a name not in use), the checks through ``attention_check_save`` and
    the test through ``qualification_test_save`` (change rights on the copy). ``user`` must be
    allowed to see ``study`` (``studies_for_user``: own it, or any share of it, a view share too: a
    copy shows nothing the study page does not, and its reference data is checked as for any new
    study). A study of imported outcomes has no design and is refused. One transaction: a refusal
    leaves nothing behind. Raises ``StudyError`` naming the field or the reason (``problems`` holds
    the field's reason when one field is at fault)."""
    if user is not None and not studies_for_user(user=user, access=VIEW).filter(pk=study.pk).exists():
        raise StudyError(f"study {study.pk}: not found or not yours to copy (you copy a study you own or that "
                         "is shared with you).")
    study_add_check(user=user)
    name = (name or "").strip()
    if platform is not None and platform not in Platform.values:
        reason = f"{str(platform)[:30]!r} is not a platform ({', '.join(Platform.values)})."
        raise StudyError(f"platform: {reason}", {"platform": reason})
    try:
        with transaction.atomic():
            return _copy(study=study, user=user, name=name, platform=platform)
    except IntegrityError:
        # Two copies given one name at once: the second's insert hits the unique name.
        if Study.objects.filter(name=name).exists():
            _refuse_name(name)
        raise


def _copy(*, study: Study, user, name: str, platform: str | None) -> Study:
    # The source's design read once, its row locked against a change to it meanwhile (the study
    # page's save and the checks' and test's services lock it FOR UPDATE); FOR NO KEY UPDATE lets
    # its workers' claims (FOR KEY SHARE) go on.
    source = Study.objects.select_for_update(no_key=True).filter(pk=study.pk).first()
    if source is None:
        raise StudyError(f"study {study.pk}: not found or not yours to copy.")
    if source.is_imported_outcome:
        raise StudyError(f"study {source.name!r} holds outcomes imported from elsewhere: it has no design (no "
                         "workers, pay, consent or checks) to copy. Create a new study instead.")
    if name and Study.objects.filter(name=name).exists():
        _refuse_name(name)
    fields: dict[str, Any] = {field: getattr(source, field) for field in COPIED_FIELDS}
    if platform is not None:
        fields["platform"] = platform
    _refuse_closed(fields["platform"])
    # The study's items as they are, not drawn again: its split may have changed since (a re-import
    # moves items), or its items were chosen otherwise (a bundle's); a draft with none draws.
    items = list(source.items.order_by("external_id", "pk")) or None
    copy = study_create(name=name, sources=list(source.sources.order_by("pk")), user=user, items=items, **fields)
    try:
        for check in AttentionCheck.objects.filter(study=source).order_by("pk"):
            attention_check_save(check=AttentionCheck(study=copy, question=check.question,
                                                      choices=check.choices, correct_answer=check.correct_answer),
                                 user=user)
        test = QualificationTest.objects.filter(study=source).first()
        if test is not None:
            qualification_test_save(test=QualificationTest(study=copy, pass_mark=test.pass_mark,
                                                           instructions=test.instructions),
                                    user=user, questions=qualification_questions(test))
    except (AttentionCheckRefused, QualificationTestRefused, QualificationSetupError, ValidationError) as exc:
        raise StudyError(f"study {source.name!r} was not copied: its attention checks or qualification test could "
                         f"not be copied: {exc}") from exc
    copy.refresh_from_db()
    return copy
