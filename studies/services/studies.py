"""Writes of study designs: create a study, update its design, draw its item sample."""
from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction

from studies.design import sample_drawn
from studies.models import Dataset, Item, Platform, RationaleSource, Study, StudyShare
from studies.selectors import (
    ACCESS_PERMISSIONS,
    CHANGE,
    datasets_for_design,
    datasets_for_user,
    sources_for_design,
    sources_for_user,
    study_user_may,
)
from studies.signals import study_owner_changed


class StudyError(Exception):
    """A study design cannot be made or changed as asked; the message says why and what to do, and
    ``problems`` (when the design rules refused it) names each field with its reason."""

    def __init__(self, message: str, problems: Mapping[str, str] | None = None):
        super().__init__(message)
        self.problems = dict(problems or {})


def _validation_message(exc: ValidationError) -> str:
    if hasattr(exc, "message_dict"):
        return "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items())
    return " ".join(exc.messages)


def _full_clean(study: Study) -> None:
    """``study.full_clean()``, its errors raised as one StudyError that names each field."""
    try:
        study.full_clean()
    except ValidationError as exc:
        # each field's problems beside it (``StudyError.problems``), the model's own as non_field_errors
        problems = {"non_field_errors" if name == NON_FIELD_ERRORS else name: " ".join(messages)
                    for name, messages in (exc.message_dict if hasattr(exc, "message_dict") else {}).items()}
        raise StudyError(_validation_message(exc), problems) from None


# How the release before stored entry tokens and completion codes derived them from the secret
# key (annotations.platforms.handoff then; studies migration 0020 keeps its own copy of the rule).
_PREVIOUS_TOKEN_SALT = "annotations.platforms.study"


def _previous_release_ids(study_id: int) -> tuple[str, str]:
    """(entry token, completion code) the release before stored them gave study ``study_id`` under
    the secret key in force: what a study it inserted while a deploy ran was published with."""
    token = signing.Signer(salt=_PREVIOUS_TOKEN_SALT).sign(str(study_id))
    code = hmac.new(settings.SECRET_KEY.encode(), f"completion:{study_id}".encode(), hashlib.sha256)
    return token, code.hexdigest()[:8].upper()


def study_for_previous_release_token(token: str) -> Study | None:
    """The study whose entry link the release before stored tokens handed out as ``token`` (its
    key-derived form, ``<id>:<signature>``, checked under the key in force), when that study's row
    has no stored token yet (``study_public_ids`` stores it now); None otherwise. For a study that
    release inserted while a deploy ran, whose link a worker may open before anyone read its ids."""
    try:
        study_id = int(signing.Signer(salt=_PREVIOUS_TOKEN_SALT).unsign(token))
    except (signing.BadSignature, ValueError):
        return None
    study = Study.objects.filter(pk=study_id, entry_token__isnull=True).first()
    return study_public_ids(study=study) if study is not None else None


def study_public_ids(*, study: Study) -> Study:
    """``study`` with its entry token and completion code (``Study.entry_token``,
    ``Study.completion_code``), stored now where its row has none: a study inserted by code that did
    not know them (the previous release while a deploy ran, a migration's historical model) gets the
    values that release gave it, derived from the secret key as studies migration 0020 stores them
    for older studies, so a link or code it handed out keeps working; once (a conditional UPDATE: two
    readers at once keep the first writer's). A study that has both is returned as it is, with no
    statement."""
    if study.entry_token and study.completion_code:
        return study
    token, code = _previous_release_ids(study.pk)
    Study.objects.filter(pk=study.pk, entry_token__isnull=True).update(entry_token=token)
    Study.objects.filter(pk=study.pk, completion_code__isnull=True).update(completion_code=code)
    study.refresh_from_db(fields=["entry_token", "completion_code"])
    return study


def study_change_check(*, study: Study, user) -> None:
    """Refuse ``user`` (None: the operator, never refused) a study they may not change, with
    ``StudyError``. The services that change a study call it themselves (here, and the outcomes
    import), so the admin, the API, a command and a task get one answer; the message does not name
    a study the user may not reach."""
    if user is not None and not study_user_may(user=user, study=study, access=CHANGE):
        raise StudyError(f"study {study.pk}: not found or not yours to change (studies.change_study on a study "
                         "you own or that is shared with you).")


def study_owner_or_superuser(*, study: Study, user) -> bool:
    """Whether ``user`` may do what only a study's owner does: they are active and own ``study``, or
    are a superuser. The one rule for sharing it or changing a share (``studies.services.sharing``),
    handing it to another owner (``study_update``), deleting it (``study_delete``) and making a study
    owned by someone else (``study_insert``: a superuser only). A share, at any level, grants none of
    these. The operator (None) is not an owner here: the services that let it act skip this check."""
    active = user is not None and user.is_authenticated and user.is_active
    return active and (user.is_superuser or (study.owner_id is not None and study.owner_id == user.pk))


def study_add_check(*, user) -> None:
    """Refuse ``user`` (None: the operator, never refused) a new study unless they hold
    ``studies.add_study``, with ``StudyError``: the services that make a study for the user who
    acts (the outcomes and bundle imports) call it themselves, as the admin and the API check it."""
    if user is not None and not user.has_perm("studies.add_study"):
        raise StudyError("you may not create studies (it needs the permission studies.add_study).")


def study_delete_check(*, study: Study, user) -> None:
    """Refuse ``user`` (None: the operator, never refused) the deletion of ``study`` unless they own
    it (or are a superuser) and hold ``studies.delete_study``, with ``StudyError``: a share, even
    CHANGE, does not grant deleting. ``study_delete`` calls it; the admin asks it whether to offer
    deleting. The message does not name a study the user may not reach."""
    if user is not None and not (study_owner_or_superuser(study=study, user=user)
                                 and user.has_perm("studies.delete_study")):
        raise StudyError(f"study {study.pk}: not found or not yours to delete (only its owner deletes a study, with "
                         "studies.delete_study; a share does not grant it).")


def study_delete(*, study: Study, user) -> None:
    """Delete ``study``, a draft, for ``user``, who must own it or be a superuser and hold
    ``studies.delete_study`` (``study_delete_check``; None: the operator). A study that opened is
    never deleted (its units, answers and payments are the record; close it instead). Judged on the
    stored row, locked until it is deleted (``study_open`` locks it too), never on the instance
    passed in: the admin's copy was loaded before another request may have opened the study."""
    study_delete_check(study=study, user=user)
    with transaction.atomic():
        stored = Study.objects.select_for_update().filter(pk=study.pk).first()
        if stored is None:
            raise StudyError(f"study {study.pk}: not found or not yours to delete (only its owner deletes a study, "
                             "with studies.delete_study; a share does not grant it).")
        study_delete_check(study=stored, user=user)
        if stored.status != Study.Status.DRAFT:
            raise StudyError(f"study {stored.name!r} is {stored.get_status_display().lower()}: only a draft study "
                             "can be deleted.")
        stored.delete()


def _reference_problems(*, user, dataset: Dataset | None = None, sources: Iterable[RationaleSource] = (),
                        study: Study | None = None) -> dict[str, str]:
    """The dataset and sources of ``sources`` that ``user`` may not use in a study design, as {field:
    reason}: a study brings into view the items of its dataset's split and their rationales from its
    sources, so it uses only reference data the user reads in full (the model's view permission,
    ``studies.view_dataset`` / ``studies.view_rationalesource``) or that a study they may change uses
    (``datasets_for_design``, ``sources_for_design``: their own, or one shared with them at change
    level), never data they read only through a study shared with them that they may only view.
    ``study`` is the stored study being changed (``study_update``). A row the user may not read at
    all is named by id only (its name is not theirs to read); one they read through a study is
    named with its name."""
    problems: dict[str, str] = {}
    own = study is not None and study.owner_id is not None and study.owner_id == getattr(user, "pk", None)
    if dataset is not None and not datasets_for_design(user=user, study=study).filter(pk=dataset.pk).exists():
        if datasets_for_user(user=user).filter(pk=dataset.pk).exists():
            problems["dataset"] = (
                f"Dataset {dataset.pk} {dataset.name!r}: you may read it only through "
                f"{_read_through(own=own, study=study, dataset=dataset)}, which does not let you draw items from it "
                "into a study (a new one, or a changed dataset, split, sample size or seed): a study uses a dataset "
                "you read with studies.view_dataset, or one that another study you may change uses. Ask the owner of "
                "a study that uses it to share it with you at change level, or an administrator for "
                "studies.view_dataset.")
        else:
            problems["dataset"] = (f"Dataset {dataset.pk}: not found or not yours to use (it needs "
                                   "studies.view_dataset, or a study you may change that uses it).")
    sources = list(sources)
    if sources:
        pks = {s.pk for s in sources}
        usable = set(sources_for_design(user=user, study=study).filter(pk__in=pks).values_list("pk", flat=True))
        readable = set(sources_for_user(user=user).filter(pk__in=pks - usable).values_list("pk", flat=True))
        hidden = sorted(pks - usable - readable)
        reasons = []
        if readable:
            named = ", ".join(f"{s.pk} {s.name!r}" for s in sorted({s for s in sources if s.pk in readable},
                                                                     key=lambda s: s.pk))
            reasons.append(
                f"Rationale source(s) {named}: you may read it only through "
                f"{_read_through(own=own, study=study, sources=readable)}, which does not let you put it in a study "
                "(a new one, changed sources, or a changed dataset, split, sample size or seed): a study uses a "
                "source you read with studies.view_rationalesource, or one that another study you may change lists. "
                "Ask the owner of a study that lists it to share it with you at change level, or an administrator "
                "for studies.view_rationalesource.")
        if hidden:
            reasons.append(f"Rationale source(s) {', '.join(map(str, hidden))}: not found or not yours to use (it "
                           "needs studies.view_rationalesource, or a study you may change that lists it).")
        if reasons:
            problems["sources"] = " ".join(reasons)
    return problems


def _read_through(*, own: bool, study: Study | None, dataset: Dataset | None = None,
                  sources: set[int] | None = None) -> str:
    """How a user reads reference data they may not use in a study design: the words for the
    refusal of ``_reference_problems``."""
    if not own:
        return "a study shared with you that you may only view"
    uses = (study.dataset_id == dataset.pk if dataset is not None
            else bool(sources & set(study.sources.values_list("pk", flat=True))))
    shared = "a study shared with you that you may only view"
    return f"this study itself, or {shared}" if uses else shared


def study_sample_items(*, study: Study, user) -> list[Item]:
    """Draw the study's items again (``study_items_draw``), for ``user``, who must be allowed to
    change the study (None: the operator)."""
    study_change_check(study=study, user=user)
    return study_items_draw(study=study)


def study_items_draw(*, study: Study) -> list[Item]:
    """Draw the study's items from its dataset split: all of them when ``item_sample_size`` is
    empty, else a sample drawn with ``random.Random(sample_seed)`` from the items ordered by
    external id, so the same seed gives the same sample on any database. Only a draft study can
    be re-sampled. The status and the sample's settings are read from the study's row, locked ``FOR
    UPDATE`` until the items are written, not from ``study``, which may be a copy read before the
    study was opened or changed (as the admin's action reads it; opening locks the same row).
    Returns the items, ordered by external id.

    No right is checked here: the caller checked the acting user's (``study_sample_items``,
    ``study_update``, ``annotations.services.opening.study_open``) or made the study
    (``study_insert``). Anyone else calls ``study_sample_items``."""
    with transaction.atomic():
        stored = Study.objects.select_for_update().get(pk=study.pk)
        if stored.status != Study.Status.DRAFT:
            raise StudyError(
                f"study {stored.name!r} is {stored.get_status_display().lower()}: only a draft can be re-sampled")
        _refuse(_sample_problems(dataset=stored.dataset, split=stored.split, size=stored.item_sample_size))
        pool = list(Item.objects.filter(dataset=stored.dataset, split=stored.split).order_by("external_id"))
        chosen = sample_drawn(pool, size=stored.item_sample_size, seed=stored.sample_seed)
        study.items.set(chosen)
        return chosen


SAMPLE_FIELDS = {"dataset", "split", "item_sample_size", "sample_seed"}
DESIGN_FIELDS = {
    "name", "kind", "dataset", "split", "item_sample_size", "sample_seed", "annotators_per_unit", "units_per_task",
    "reward", "hourly_pay_floor", "estimated_minutes_per_task", "platform", "consent_text", "instructions",
    "example", "faithfulness_enabled", "owner", "stop_when_decided",
}
# Kinds scored by the majority of the before and after answers: the only ones a unit can stop early in.
STOP_WHEN_DECIDED_KINDS = (Study.Kind.UTILITY, Study.Kind.GENERALIZATION)


def study_create(
    *,
    name: str,
    dataset: Dataset,
    kind: str = Study.Kind.UTILITY,
    split: str = "test",
    sources: Iterable[RationaleSource] = (),
    item_sample_size: int | None = None,
    sample_seed: int = 0,
    annotators_per_unit: int = 5,
    units_per_task: int = 10,
    reward: Decimal | str | float = Decimal("2.00"),
    hourly_pay_floor: Decimal | str | float = Decimal("15.00"),
    estimated_minutes_per_task: Decimal | str | float = Decimal("6.0"),
    platform: str = Platform.LINK,
    owner: Any = None,
    consent_text: str = "",
    instructions: str = "",
    example: str = "",
    faithfulness_enabled: bool = False,
    stop_when_decided: bool = False,
    user: Any = None,
    items: Iterable[Item] | None = None,
) -> Study:
    """Create a draft study design and draw its item sample, or take the ``items`` given
    (``study_insert``), for ``user`` (None: the operator; see ``study_insert`` for what a user is
    refused). Raises StudyError with a message the researcher can act on (bad numbers, a name in
    use, an empty split, a sample too large, a source without rationales)."""
    study = Study(
        name=name.strip(), kind=kind, dataset=dataset, split=split, item_sample_size=item_sample_size,
        sample_seed=sample_seed, annotators_per_unit=annotators_per_unit, units_per_task=units_per_task,
        reward=Decimal(str(reward)), hourly_pay_floor=Decimal(str(hourly_pay_floor)),
        estimated_minutes_per_task=Decimal(str(estimated_minutes_per_task)), platform=platform,
        owner=owner if getattr(owner, "is_authenticated", False) else None,
        consent_text=consent_text, instructions=instructions, example=example,
        faithfulness_enabled=faithfulness_enabled, stop_when_decided=stop_when_decided,
    )
    return study_insert(study=study, sources=sources, user=user, items=items)


def study_insert(*, study: Study, sources: Iterable[RationaleSource] = (), user: Any = None,
                 items: Iterable[Item] | None = None) -> Study:
    """Save ``study``, a new draft design the caller built unsaved (``study_create`` builds one from
    its arguments, the admin's study form holds one), set its sources and draw its item sample, all
    or nothing, for ``user`` (None: the operator, who may make any study for anyone). A user must
    hold ``studies.add_study`` (``study_add_check``); the study is theirs (an empty owner becomes
    them; only a superuser makes one owned by someone else, ``study_owner_or_superuser``); and its
    dataset and sources must be ones they may use in a design (``_reference_problems``: read with
    the model's view permission, or used by a study they may change; what a study shared with them
    only for viewing uses is theirs to read, not to build on).
    ``items`` (None: drawn) are the study's items as given, not drawn: a copy's, which shows
    exactly the items of the study it copies (``annotations.services.copying.study_copy``), though
    its split has changed since. They must be of the study's dataset; the split's pool and the
    sample size, which only a draw reads, are not checked (``study_design_problems``, ``drawn``).
    Raises StudyError naming every problem of the design (``study_design_problems``), then any of
    the model's own checks."""
    if study.pk is not None:
        raise StudyError(f"study {study.name!r} exists already: change it with study_update")
    sources = list(sources)
    items = None if items is None else list(items)
    if user is not None:
        study_add_check(user=user)
        if study.owner_id is None and getattr(user, "is_authenticated", False):
            study.owner = user
        if not study_owner_or_superuser(study=study, user=user):
            reason = ("A study you create is yours: only a superuser creates a study owned by someone else "
                      "(leave the owner empty).")
            raise StudyError(reason, {"owner": reason})
        _refuse(study_reference_problems(study=study, user=user, sources=sources))
    problems = study_design_problems(study=study, sources=sources, drawn=items is None)
    if items is not None and not items:
        problems["items"] = "No items given: give the study's items, or none to draw its sample."
    elif items is not None and any(item.dataset_id != study.dataset_id for item in items):
        problems["items"] = f"Items of another dataset than the study's ({study.dataset}) were given."
    _refuse(problems)
    _full_clean(study)
    with transaction.atomic():
        study.save()
        study.sources.set(sources)
        if items is None:
            study_items_draw(study=study)
        else:
            study.items.set(items)
    return study


# Fixed once a study is no longer a draft (open or closed), for everyone: its owner, a superuser and
# the operator too. What its units were built with (its kind, items and workers per unit, whether a
# unit stops early), what its workers were offered and are paid by (``PAY_FIELDS``), and the consent
# they agreed to (each consent receipt records the SHA-256 of the text its worker was shown:
# ``annotations.services.entry.consent_take``).
LOCKED_FIELDS = ("kind", "dataset", "split", "item_sample_size", "sample_seed", "annotators_per_unit",
                 "stop_when_decided", "units_per_task", "reward", "hourly_pay_floor", "estimated_minutes_per_task",
                 "platform", "consent_text")
# What a task was offered at and is paid by: an MTurk HIT's reward and duration and a Prolific study's
# reward and completion time are the platform's once published (neither is changed afterwards), an
# approval records the study's reward as the amount paid, the entry, hand-back and pay calls follow the
# study's platform, tasks' deadlines follow its minutes, the cost and pay pages (and their below-floor
# warnings) read all of them, and a task's size is what its reward pays for. To pay workers more, pay a
# bonus; to offer other terms, copy the study (``annotations.services.copying.study_copy``).
PAY_FIELDS = ("units_per_task", "reward", "hourly_pay_floor", "estimated_minutes_per_task", "platform")
# How long its workers have for a task and a new task waits for its first answer: set by opening
# alone (``annotations.services.opening.study_open``, from the deadline rule as it reads then, or by
# the migration that added them for a study already open), never by a researcher, a draft's
# included; fixed from then on like ``LOCKED_FIELDS``. Read-only on the study page.
TASK_MINUTES_FIELDS = ("assignment_minutes", "first_answer_minutes")
# Whether scoring computes the study's faithfulness (SPEC §6, opt-in: ``scoring.services.score._faithfulness``).
# Once the study opens it may be turned on (scoring then adds sufficiency and comprehensiveness,
# computed on the probabilities stored with its sources' rationales; nothing its workers saw, and no
# other figure, changes) but not off: a re-score would drop the faithfulness figures it published,
# with no word of them. Fixed, for everyone, once on (``study_locked_changes``); the highlights of
# the sources such a study uses are kept as well (``studies.services.content.HIGHLIGHTS_FIELDS``).
FAITHFULNESS_FIELD = "faithfulness_enabled"


def study_fixed_fields(*, study: Study) -> tuple[str, ...]:
    """The design fields ``study`` no longer lets anyone change (``study_locked_changes``): none for a
    draft, else ``LOCKED_FIELDS``, its sources and its tasks' minutes (``TASK_MINUTES_FIELDS``,
    which no one sets on a draft either), and its faithfulness while it is on (``FAITHFULNESS_FIELD``:
    it may still be turned on). The study page refuses a change to each beside
    its field, and shows the consent text read-only (``cockpit.admin.StudyForm``)."""
    if study.pk is None or study.status == Study.Status.DRAFT:
        return ()
    return (*LOCKED_FIELDS, "sources", *TASK_MINUTES_FIELDS, *([FAITHFULNESS_FIELD] if study.faithfulness_enabled else []))


def _unchanged(study: Study, field: str, value: Any) -> bool:
    """Whether ``value`` is what ``study`` stores in ``field``, read as the field reads it (a reward
    of "2.5" is the stored Decimal("2.50")); a value the field cannot read is a change (full_clean
    says why)."""
    stored = getattr(study, field)
    model_field = Study._meta.get_field(field)
    if model_field.is_relation:
        return value == stored
    try:
        return model_field.to_python(value) == stored
    except ValidationError:
        return False


def _minutes(value: float | None) -> str:
    return "no" if value is None else f"{value:g}"


def _task_minutes_reason(study: Study, field: str) -> str:
    """Why ``field``, one of ``TASK_MINUTES_FIELDS``, is not a researcher's to set."""
    if study.status != Study.Status.DRAFT:
        return _locked_reason(study, field)
    return (f"{Study._meta.get_field(field).verbose_name} is set when the study opens, from the deadline rule as it "
            "reads then (RL_ASSIGNMENT_MINUTES and RL_FIRST_ANSWER_MINUTES, else the estimated minutes per task): "
            "not a researcher's to set; change the estimated minutes per task instead.")


def _locked_reason(study: Study, field: str) -> str:
    state = study.get_status_display().lower()
    why = {
        "kind": f"its kind cannot change (its units, its workers' questions and its scores are those of a "
                f"{study.get_kind_display().lower()} study)",
        "stop_when_decided": "whether a unit stops when its result is decided cannot change (its units were filled "
                             "under that rule)",
        "annotators_per_unit": f"its workers per unit cannot change (its units, progress and cost were built with "
                               f"{study.annotators_per_unit})",
        "units_per_task": f"its units per task cannot change (each task was offered at its reward for "
                          f"{study.units_per_task} units, and its published tasks were counted with it)",
        "reward": f"its reward per task cannot change (workers were offered {study.reward} a task: a published MTurk "
                  "HIT or Prolific study keeps the reward it was published with, and approving pays it); pay more "
                  "as a bonus, or copy the study to offer another reward (Copy this study, on the study page)",
        "hourly_pay_floor": f"its hourly pay floor cannot change (its workers' pay is checked against the "
                            f"{study.hourly_pay_floor}/hour it opened with); pay a bonus to bring pay up to it",
        "estimated_minutes_per_task": f"its estimated minutes per task cannot change (its workers were told "
                                      f"{study.estimated_minutes_per_task}: a published HIT's duration or Prolific "
                                      "study's completion time was set from it, and its tasks' deadlines follow it)",
        "platform": f"its platform cannot change (its workers arrive, hand back and are paid through "
                    f"{study.get_platform_display()}); copy the study to run it elsewhere (Copy this study, on the "
                    "study page)",
        "consent_text": "its consent text cannot change (its workers agreed to it as it reads, and each "
                        "worker's consent records that text's SHA-256); copy the study to ask for other consent "
                        "(Copy this study, on the study page)",
        "assignment_minutes": f"its minutes a worker has for a task cannot change (fixed at "
                              f"{_minutes(study.assignment_minutes)} when it opened: its workers were promised them "
                              "and its platform's time limit was set from them); copy the study to offer other terms "
                              "(Copy this study, on the study page)",
        "first_answer_minutes": f"its minutes a new task waits for its first answer cannot change (fixed at "
                                f"{_minutes(study.first_answer_minutes)} when it opened, with its tasks' minutes); "
                                "copy the study to offer other terms (Copy this study, on the study page)",
        FAITHFULNESS_FIELD: "its faithfulness cannot be turned off (scoring computes its sufficiency and "
                            "comprehensiveness, which a re-score without it would drop from its published results); "
                            "copy the study to score one without faithfulness (Copy this study, on the study page)",
    }.get(field, "its items cannot change")
    return f"The study is no longer a draft ({state}): {why}."


def study_fixed_reason(*, study: Study, field: str) -> str:
    """Why ``field``, one of ``study_fixed_fields(study=study)``, cannot change: the words
    ``study_locked_changes`` refuses a change with, for a page that shows the field read-only."""
    return _locked_reason(study, field)


def study_locked_changes(*, study: Study, changes: dict[str, Any],
                         sources: Iterable[RationaleSource] | None = None) -> dict[str, str]:
    """What of ``changes`` (and ``sources``) a study that is no longer a draft refuses, as
    {field: reason}: its kind, items (sampling fields) and sources, its workers per unit and
    early stopping, since its units, their counters, the progress and the cost were built with them;
    and what its workers were offered and are paid by (``PAY_FIELDS``: units per task, reward, hourly
    floor, estimated minutes, platform), the consent text they agreed to and how long they have for a
    task (``TASK_MINUTES_FIELDS``); and turning its faithfulness off (``FAITHFULNESS_FIELD``: turning
    it on stays allowed). For everyone, the owner and the operator too. Empty for a draft,
    but for the tasks' minutes. The one owner of this rule: ``study_update`` enforces it
    (under a lock on the study, so it cannot open between the check and the write), the study form
    shows it per field (the consent text read-only, so that a browser's line breaks never read as a
    change), and ``study_fixed_fields`` names the fields it fixes. The tasks' minutes
    (``TASK_MINUTES_FIELDS``) are refused a draft too: opening sets them, from the deadline rule."""
    refused = {field: _task_minutes_reason(study, field) for field in TASK_MINUTES_FIELDS
               if field in changes and not _unchanged(study, field, changes[field])}
    if study.status == Study.Status.DRAFT:
        return refused
    refused.update({field: _locked_reason(study, field) for field in LOCKED_FIELDS
                    if field in changes and not _unchanged(study, field, changes[field])})
    if (FAITHFULNESS_FIELD in changes and study.faithfulness_enabled
            and not _unchanged(study, FAITHFULNESS_FIELD, changes[FAITHFULNESS_FIELD])):
        refused[FAITHFULNESS_FIELD] = _locked_reason(study, FAITHFULNESS_FIELD)
    if sources is not None and set(sources) != set(study.sources.all()):
        state = study.get_status_display().lower()
        refused["sources"] = f"The study is no longer a draft ({state}): its sources cannot change."
    return refused


NEEDS_SOURCES = (Study.Kind.UTILITY, Study.Kind.GENERALIZATION, Study.Kind.RATIONALE_PROPERTIES)


def study_design_problems(*, study: Study, changes: Mapping[str, Any] | None = None,
                          sources: Iterable[RationaleSource] | None = None, drawn: bool = True) -> dict[str, str]:
    """What is wrong with a study design, as {field: reason}; empty when nothing is. ``study`` is
    a new, unsaved design, or the stored study with ``changes`` (its value stands for a field not
    in them); ``sources`` None leaves the sources as they are; ``drawn`` False: a new study's items
    are given, not drawn (``study_insert``'s ``items``), so the split's pool is not checked.

    The one set of design rules: ``study_insert`` and ``study_update`` refuse a design with any
    problem (StudyError with the reasons), and the admin's study form shows each beside its field.
    The rules: a study no longer a draft keeps its kind, items, sources, workers per unit, early
    stopping, what its workers were offered and are paid by, the consent they agreed to and its
    faithfulness once on (``study_locked_changes``); the split has items, at least as many as the sample size
    (``study_sample_items`` draws them); a study that shows rationales has at least one source, and
    none is listed twice; only a study scored by majorities before and after stops units
    early (``STOP_WHEN_DECIDED_KINDS``); a new owner is an active account, as a share's recipient is,
    and one the study is handed to may change studies (``_owner_problems``). (A source may have no
    rationales yet: the design summary counts the missing ones, and a gold source shows the items'
    own rationales. Nor are a rationale properties study's rationales without a predicted answer
    refused here: they may be imported after the study is made, so the one unit derivation,
    ``studies.design.design_units``, yields no units while there are any, names them by source, and
    ``study_open`` refuses the study with that reason.)"""
    changes = dict(changes or {})
    problems = study_locked_changes(study=study, changes=changes, sources=sources) if study.pk else {}
    design = {f: changes[f] if f in changes else _stored(study, f)
              for f in ("kind", "dataset", "split", "item_sample_size", "stop_when_decided")}
    dataset, split = design["dataset"], design["split"]
    if dataset is not None and split and drawn:
        problems.update(_sample_problems(dataset=dataset, split=split, size=design["item_sample_size"]))
    if sources is not None and "sources" not in problems:
        problems.update(_source_problems(kind=design["kind"], sources=list(sources)))
    problems.update(_owner_problems(study=study, changes=changes))
    if design["stop_when_decided"] and design["kind"] not in STOP_WHEN_DECIDED_KINDS:
        # Stopping a unit early needs a score decided by majorities (utility, generalization).
        problems["stop_when_decided"] = (
            f"A {Study.Kind(design['kind']).label.lower()} study is not scored by the majority of before and after "
            "answers, so no unit can be decided early: turn it off (utility and generalization studies only).")
    return problems


def study_recipient_active(user) -> bool:
    """Whether ``user`` may receive a study: an active account, read afresh (the row, not a user
    object that may be stale). The rule a share's recipient meets
    (``studies.services.sharing.share_recipient_get`` / ``study_share``: "not found or not active"),
    and so a new owner too: an inactive owner cannot reach the study they were handed."""
    pk = getattr(user, "pk", None)
    return pk is not None and get_user_model().objects.filter(pk=pk, is_active=True).exists()


def study_owner_may_change(user) -> bool:
    """Whether ``user``, owning a study, could change it: a superuser, or an account holding the
    permission the study selectors ask of an owner for CHANGE (``ACCESS_PERMISSIONS[CHANGE]``,
    ``studies.change_study``; being staff grants nothing), read afresh. Without it the owner could
    neither change nor close the study (the app's own early-stop close acts as the operator and
    still closes it). A share's recipient needs no more than to be active
    (``study_recipient_active``): a view share changes nothing, and the access selector asks the
    permission of a change or pay share when it is used."""
    pk = getattr(user, "pk", None)
    fresh = get_user_model().objects.filter(pk=pk, is_active=True).first() if pk is not None else None
    return fresh is not None and (fresh.is_superuser or fresh.has_perm(ACCESS_PERMISSIONS[CHANGE]))


def _owner_problems(*, study: Study, changes: Mapping[str, Any]) -> dict[str, str]:
    """A study handed to another owner (``changes["owner"]``), or made for one, goes only to an
    account a study may be shared with (``study_recipient_active``); one handed over, only to an
    owner who could change it (``study_owner_may_change``: a new study's owner is its maker, who
    holds ``studies.add_study``, or the one the operator or a superuser made it for, as before); an
    owner it keeps is not asked again, and an empty owner is the operator's (or, in
    ``study_insert``, becomes the user)."""
    if study.pk is None:
        owner = changes["owner"] if "owner" in changes else (study.owner if study.owner_id else None)
    else:
        owner = changes.get("owner")
        if owner is not None and owner.pk == study.owner_id:
            return {}
    if owner is None:
        return {}
    if not study_recipient_active(owner):
        return {"owner": f"user {owner.pk}: not found or not active: a study goes only to an active researcher."}
    if study.pk is not None and not study_owner_may_change(owner):
        return {"owner": (f"user {owner.pk} may not change studies ({ACCESS_PERMISSIONS[CHANGE]}, or a superuser): "
                          "as the owner they could not change or close this study (nor could an early stop, which "
                          "acts as the owner), so a study goes only to a researcher who may change it.")}
    return {}


def _stored(study: Study, field: str) -> Any:
    if field == "dataset":
        return study.dataset if study.dataset_id else None
    return getattr(study, field)


def _sample_problems(*, dataset: Dataset, split: str, size: int | None) -> dict[str, str]:
    pool = Item.objects.filter(dataset=dataset, split=split).count()
    if not pool:
        return {"split": f"{dataset} has no items in the {split} split: import them first."}
    if size == 0:  # a sample of none: a study of no items (its preview said "no items yet")
        return {"item_sample_size": "The sample size must be at least 1: leave it empty to take all."}
    if size and size > pool:
        return {"item_sample_size": f"The sample size {size} is larger than the {pool} items of the {split} split: "
                                    "lower it or leave it empty to take all."}
    return {}


def _source_problems(*, kind: str, sources: list[RationaleSource]) -> dict[str, str]:
    if kind in NEEDS_SOURCES and not sources:
        return {"sources": f"A {Study.Kind(kind).label.lower()} study needs at least one rationale source."}
    if len({s.pk for s in sources}) != len(sources):
        return {"sources": "A rationale source is listed twice."}
    return {}


def _refuse(problems: dict[str, str], *, study: Study | None = None) -> None:
    if problems:
        where = f"study {study.name!r}: " if study is not None else ""
        raise StudyError(where + " ".join(dict.fromkeys(problems.values())), problems)


def study_reference_problems(*, study: Study, user, changes: Mapping[str, Any] | None = None,
                             sources: Iterable[RationaleSource] | None = None) -> dict[str, str]:
    """The reference data of a design that ``user`` (None: the operator, never refused) may not use,
    as {field: reason} (``_reference_problems``): for a new study (``study`` unsaved) its dataset and
    ``sources``; for a stored one with ``changes`` and ``sources`` (None: as they are) what the change
    brings into view (``_redrawn_reference``). What ``study_insert`` and ``study_update`` refuse, for
    a form that shows each reason beside its field."""
    if user is None:
        return {}
    changes = dict(changes or {})
    if study.pk is None:
        dataset = changes["dataset"] if "dataset" in changes else _stored(study, "dataset")
        return _reference_problems(user=user, dataset=dataset if isinstance(dataset, Dataset) else None,
                                   sources=list(sources or ()))
    return _reference_problems(user=user, study=study, **_redrawn_reference(
        study, changes, None if sources is None else list(sources)))


def _redrawn_reference(study: Study, changes: Mapping[str, Any],
                       sources: list[RationaleSource] | None) -> dict[str, Any]:
    """What of a change to ``study`` (stored) brings reference data into view, for
    ``_reference_problems``: a change to its items (dataset, split, sample size or seed,
    ``SAMPLE_FIELDS``) draws other items of its dataset and shows their rationales from every one of
    its sources, so the dataset and all its sources as they will be are checked; else only the
    sources it adds (a source taken off, or a change to anything else, shows nothing new). Nothing
    of a study that is no longer a draft: its items and sources are fixed (``study_locked_changes``
    refuses such a change, with its own reason)."""
    if study.status != Study.Status.DRAFT:
        return {}
    kept = list(study.sources.all())
    after = kept if sources is None else sources
    if any(f in changes and not _unchanged(study, f, changes[f]) for f in SAMPLE_FIELDS):
        dataset = changes["dataset"] if "dataset" in changes else _stored(study, "dataset")
        return {"dataset": dataset if isinstance(dataset, Dataset) else None, "sources": after}
    return {"sources": [s for s in after if s not in kept]}


def study_update(*, study: Study, user, sources: Iterable[RationaleSource] | None = None,
                 **changes: Any) -> Study:
    """Change a study's design, for ``user``, who must be allowed to change the study (None: the
    operator). Only its owner or a superuser hands it to another owner (``study_owner_or_superuser``:
    owning it would let someone it is shared with raise their own share), who must be active and may
    change studies (``_owner_problems``); the handover deletes, in the same transaction, any share of
    the new owner and of the old one, who keeps no access (as before it, when they had no share).
    A change that brings other reference data into view (a new source; a new dataset, split, sample size or seed, which
    draws other items and shows their rationales) must use only reference data the user may use in a
    design (``_reference_problems``: read with its view permission, or used by a study they may
    change, this one counting only when it is shared with them, never a view share). Once the study is no
    longer a draft, its kind, items (dataset, split, sample size, seed), sources, workers per unit,
    early stopping, what its workers were offered and are paid by (units per task, reward, hourly
    floor, estimated minutes, platform), the consent text they agreed to and the tasks' minutes set when
    it opened (``TASK_MINUTES_FIELDS``, which no one sets on a draft either) are fixed for everyone,
    its owner and the operator too, and its faithfulness, once on, is not turned off
    (``study_locked_changes``); the result must pass every design rule (``study_design_problems``); a
    changed sample is drawn again. The rules are checked on the study row read under a lock, so it
    cannot open (``study_open``, a publish) between the check and the write. ``study`` is refreshed
    and returned."""
    study_change_check(study=study, user=user)
    unknown = set(changes) - DESIGN_FIELDS - set(TASK_MINUTES_FIELDS)  # those: refused with their reason
    if unknown:
        raise StudyError(f"unknown study field(s): {', '.join(sorted(unknown))}")
    sources = list(sources) if sources is not None else None
    with transaction.atomic():
        locked = Study.objects.select_for_update().get(pk=study.pk)
        if user is not None:
            if ("owner" in changes and getattr(changes["owner"], "pk", None) != locked.owner_id
                    and not study_owner_or_superuser(study=locked, user=user)):
                reason = "Only the study's owner (or a superuser) hands it to another owner."
                raise StudyError(f"study {locked.name!r}: {reason}", {"owner": reason})
            _refuse(study_reference_problems(study=locked, user=user, changes=changes, sources=sources), study=locked)
        old = {f: getattr(locked, f) for f in SAMPLE_FIELDS}
        old_owner = locked.owner_id
        resample = any(f in changes and changes[f] != old[f] for f in SAMPLE_FIELDS)
        _refuse(study_design_problems(study=locked, changes=changes, sources=sources), study=locked)
        for field, value in changes.items():
            setattr(locked, field, value)
        _full_clean(locked)
        locked.save()
        if locked.owner_id != old_owner:
            # Handed over: the new owner needs no share (``study_share`` refuses one), and a share
            # kept would outlast the handover: handing the study on, they would keep its level. The
            # old owner had none (a row of theirs is one kept by a handover before this rule) and
            # gets none: the new owner shares the study with them if they are to keep reading it.
            StudyShare.objects.filter(study=locked, user_id__in=[u for u in (old_owner, locked.owner_id) if u]).delete()
            # The new owner's blocks cover the study from now on (a block covers its researcher's
            # studies): the tasks in progress of the workers they blocked end here, with the row locked.
            study_owner_changed.send(sender=Study, study=locked, old_owner_id=old_owner)
        if sources is not None:
            locked.sources.set(sources)
        if resample or not locked.items.exists():
            study_items_draw(study=locked)
    study.refresh_from_db()
    return study
