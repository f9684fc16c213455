"""Reads of the studies app that are more than a one-liner."""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import BigIntegerField, BooleanField, Exists, F, Func, OuterRef, Q, QuerySet, Subquery
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from lab.api.counts import correlated_count
from studies.design import Capacity, design_units, sample_drawn, study_capacity
from studies.models import (
    Dataset,
    GeneralizationQuestion,
    GenerationJob,
    GenUPrediction,
    ImportJob,
    ImportRecord,
    Item,
    QuestionGenerator,
    Rationale,
    RationaleSource,
    Study,
    StudyShare,
)


@dataclass
class StudyDesignSummary:
    items: int
    sources: int
    units: int
    annotators_per_unit: int
    answers: int
    units_per_task: int
    tasks: int
    # The assignment rule (no worker sees a question twice): the largest task the design allows,
    # its distinct questions, and the fewest different workers that can fill the quota.
    largest_task: int
    questions: int
    workers: int
    # The design's planned time (its estimate); what the study costs and pays is read by the one
    # cost-and-pay selector, ``annotations.selectors.cost.study_cost_and_pay``.
    minutes_per_task: Decimal
    worker_hours: Decimal
    missing_rationales: int
    warnings: list[str] = field(default_factory=list)
    # ``Study.stop_when_decided``: "answers to collect" is then the most the study collects.
    stop_when_decided: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


def study_design_summary(*, study: Study, collects: Capacity | None = None) -> StudyDesignSummary:
    """The design at a glance: units, answers to collect, tasks and the planned time. Cost and
    pay are not the design's: ``annotations.selectors.cost.study_cost_and_pay`` quotes them.
    ``collects``: what the study will collect when the caller knows better than the design read
    now (``annotations.selectors.cost.study_collects``: an open study's built units, which the
    cost reading quotes), so the page shows one count of units, answers, tasks and hours.

    Units are what the unit builder makes (``studies.design.design_units``); tasks and workers
    follow the assignment rule (``design_capacity``: a task holds at most one unit of each
    question, so a design with fewer questions than units per task has smaller tasks, and more
    of them). Items are the drawn sample, or what the sample would be when none is drawn yet."""
    warnings: list[str] = []
    n_items = study.items.count() if study.pk else 0
    item_ids = None
    if not n_items:
        pool = Item.objects.filter(dataset_id=study.dataset_id, split=study.split).order_by("external_id")
        item_ids = sample_drawn(list(pool.values_list("id", flat=True)), size=study.item_sample_size,
                                seed=study.sample_seed)
        n_items = len(item_ids)
        if not n_items:
            warnings.append(f"The {study.split} split of this dataset has no items yet: import the questions.")
    n_sources = study.sources.count() if study.pk else 0
    plan = design_units(study=study, item_ids=item_ids)
    capacity = collects or study_capacity(study=study, plan=plan)
    units, answers, tasks = capacity.units, capacity.answers, capacity.tasks
    missing = plan.missing_rationales
    past_draft = bool(study.pk) and study.status != Study.Status.DRAFT
    # A draft's rationales without a predicted answer keep it from opening (the plan's problem says
    # how to fix them). A study past its draft (opened before that rule, or a bundle's copy) has
    # its units built and its sources fixed: what it means is that its workers see a blank
    # predicted answer where they judge whether the rationale supports it, counted on its units.
    if plan.problem and n_items and not (past_draft and plan.unpredicted_rationales):
        warnings.append(plan.problem)
    if past_draft and plan.unpredicted_rationales:
        # The design's own count (its rationales without a predicted answer, by source), which its
        # built units show: a study past its draft keeps the units it was opened with.
        named = ", ".join(f"{n} from source '{name}'" for name, n in plan.unpredicted_rationales.items())
        were = "are" if study.status == Study.Status.OPEN else "were"
        warnings.append(
            f"This study's workers {were} shown a blank predicted answer for "
            f"{sum(plan.unpredicted_rationales.values())} of its rationales ({named}) and asked whether each "
            "rationale supports it: their answers to that question say nothing about those rationales."
        )
    if missing and plan.units:
        warnings.append(f"{missing} (item, source) pairs have no rationale yet: generate or import them.")
    if capacity.warning:
        warnings.append(capacity.warning)
    if study.pk and not study.consent_text.strip():
        warnings.append("There is no consent text yet: a study opens only with the text workers agree to.")

    minutes = Decimal(str(study.estimated_minutes_per_task))
    return StudyDesignSummary(
        items=n_items,
        sources=n_sources,
        units=units,
        annotators_per_unit=study.annotators_per_unit,
        answers=answers,
        units_per_task=study.units_per_task,
        tasks=tasks,
        largest_task=capacity.largest_task,
        questions=capacity.questions,
        workers=capacity.workers,
        minutes_per_task=minutes,
        worker_hours=(minutes * tasks / 60).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP),
        missing_rationales=missing,
        warnings=warnings,
        stop_when_decided=study.stop_when_decided,
    )


def study_outcome_imports(*, study: Study) -> QuerySet[ImportRecord]:
    """The outcomes files imported into ``study`` (a study run elsewhere), newest first: the
    ``ImportRecord`` rows the outcomes import writes with the study's id in their summary."""
    return ImportRecord.objects.filter(kind="outcomes", summary__study=study.pk).order_by("-imported_at", "-pk")


# --- Which generalization questions count --------------------------------------------------------

# Which generalization questions a published figure counts, Gen-U and Figure 4 alike, and so which
# answers of a generalization study scoring reads (``annotations.selectors.claim_scored``): the ones
# not marked invalid when the study is scored. A question's validation may change after a study
# using it opens (``studies.services.questions``), so it is read when scoring, not when the units
# were built.
QUESTION_RULE = "questions not marked invalid when scored (validated and unvalidated ones count)"


def questions_that_count(path: str = "") -> Q:
    """``QUESTION_RULE`` as a condition on the generalization question that ``path`` leads to from
    the queried model (``"generalization_question__"`` from a ``GenUPrediction`` or a ``Unit``): the
    rule lives here and only here. No question at the end of ``path`` (a unit of another kind)
    passes."""
    return ~Q(**{f"{path}validation_status": GeneralizationQuestion.Validation.INVALID})


# --- Per-study access -------------------------------------------------------------------------
# One definition of "the studies this user may see / change / pay for", used by every admin page,
# the preview and the API. Membership: superusers reach every study; everyone else the studies they
# own, at every level, and those shared with them up to the share's level (``StudyShare``: view <
# change < pay, each including the ones before it); being staff grants nothing by itself. On top
# of membership, changing a study (its design, its attention checks, its scoring) needs
# ``studies.change_study`` and moving money for it (publishing, approving, rejecting, bonuses)
# needs ``studies.pay_workers``.
# Reference data (datasets, items, sources, rationales, generalization questions) belongs to no
# study: a user who holds the model's view permission reads all of it (rationales and
# generalization questions: those whose item, and source, they may read too), anyone else only what
# the studies they may see use.
VIEW, CHANGE, PAY = "view", "change", "pay"
LEVELS = (VIEW, CHANGE, PAY)  # the order of StudyShare.Level: a share grants its level and those before it
ACCESS_PERMISSIONS = {CHANGE: "studies.change_study", PAY: "studies.pay_workers"}
RAW_WORKER_IDS_PERMISSION = "studies.view_raw_worker_ids"


def _active(user) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_active)


def studies_for_user(*, user, access: str = VIEW) -> QuerySet[Study]:
    """The studies ``user`` may reach with ``access`` (VIEW, CHANGE or PAY): their own, and those
    shared with them at ``access`` or above, given the permission ``access`` needs."""
    if access not in LEVELS:
        raise ValueError(f"access must be one of view, change, pay; got {access!r}")
    if not _active(user):
        return Study.objects.none()
    if user.is_superuser:
        return Study.objects.all()
    if access in ACCESS_PERMISSIONS and not user.has_perm(ACCESS_PERMISSIONS[access]):
        return Study.objects.none()
    shared = StudyShare.objects.filter(user_id=user.pk, level__in=LEVELS[LEVELS.index(access):]).values("study_id")
    return Study.objects.filter(Q(owner_id=user.pk) | Q(pk__in=shared))


def _as_member(user):
    """``user`` as their membership stands (owned, shared, permissions held), whether or not their
    account is active now: an unsaved copy marked active, read only by the owner's selectors below."""
    if user is None or user.is_active:
        return user
    member = copy.copy(user)
    member.is_active = True
    return member


def study_user_may(*, user, study: Study, access: str = VIEW) -> bool:
    """Whether ``user`` may reach ``study`` with ``access``."""
    return study.pk is not None and studies_for_user(user=user, access=access).filter(pk=study.pk).exists()


def user_may_see_raw_worker_ids(user) -> bool:
    """Raw platform worker ids (MTurk WorkerId, Prolific PID) are shown only to holders of
    ``studies.view_raw_worker_ids``; everyone else sees keyed pseudonyms."""
    return _active(user) and user.has_perm(RAW_WORKER_IDS_PERMISSION)


def _reads_all(user, perm: str) -> bool:
    """Whether ``user`` reads every row of the model ``perm`` views (reference data)."""
    return _active(user) and (user.is_superuser or user.has_perm(perm))


def _all_or_used(user, model, perm: str, used: QuerySet) -> QuerySet:
    if not _active(user):
        return model.objects.none()
    if _reads_all(user, perm):
        return model.objects.all()
    return model.objects.filter(pk__in=used)


def datasets_for_user(*, user) -> QuerySet[Dataset]:
    used = studies_for_user(user=user).values("dataset_id")
    return _all_or_used(user, Dataset, "studies.view_dataset", used)


def items_for_user(*, user) -> QuerySet[Item]:
    used = Study.items.through.objects.filter(study__in=studies_for_user(user=user)).values("item_id")
    return _all_or_used(user, Item, "studies.view_item", used)


def items_for_jobs(*, user) -> QuerySet[Item]:
    """The items ``user``'s LM job may read, send and train on: every item with
    ``studies.view_item``; else those ``items_for_user`` reads (shown by a study they may see) and
    those no study shows in a dataset they may build on (``datasets_for_design``: a split only jobs
    use, a researcher's own dev split for rationales and Gen-U). Never an item only studies they may
    not read show (another researcher's study's items), nor an unshown item of a dataset they read
    only through a view share: that share reads the study, not the rest of its dataset (jobs check
    the dataset itself with ``datasets_for_user``)."""
    if not _active(user):
        return Item.objects.none()
    if _reads_all(user, "studies.view_item"):
        return Item.objects.all()
    shown = Study.items.through.objects.values("item_id")
    unshown = ~Q(pk__in=shown) & Q(dataset_id__in=datasets_for_design(user=user).values("pk"))
    return Item.objects.filter(Q(pk__in=items_for_user(user=user).values("pk")) | unshown)


def sources_for_user(*, user) -> QuerySet[RationaleSource]:
    used = Study.sources.through.objects.filter(study__in=studies_for_user(user=user)).values("rationalesource_id")
    return _all_or_used(user, RationaleSource, "studies.view_rationalesource", used)


def sources_for_owner(*, user) -> QuerySet[RationaleSource]:
    """``sources_for_user`` for what ``user``'s membership covers whether or not their account is
    active (``_as_member``): only for reads a study's scoring makes for its owner (its Gen-U
    answerers' settings)."""
    return sources_for_user(user=_as_member(user))


def datasets_counted_for_user(*, user, splits: Iterable[str] = ()) -> QuerySet[Dataset]:
    """The datasets ``user`` may read (``datasets_for_user``), each with the number of its items they
    may use (``items_for_jobs``: those a study they may see shows, and those no study shows in a
    dataset they may build on, as an owner or a collaborator with a change share does): ``n_items``,
    and ``n_<split>`` for each of ``splits``. The one owner of the counts a dataset's row shows, in
    the API and the admin: never the whole dataset's for a view share, which reads the study's
    items, not the rest of its dataset (its other splits, the owner's unshown items), nor items only
    another researcher's studies show. One correlated subquery per count."""
    readable = items_for_jobs(user=user)
    counts = {"n_items": correlated_count(readable, "dataset")}
    counts.update({f"n_{split}": correlated_count(readable.filter(split=split), "dataset") for split in splits})
    return datasets_for_user(user=user).annotate(**counts)


def design_studies_for_user(*, user, study: Study | None = None) -> QuerySet[Study]:
    """The studies whose dataset and sources ``user`` may use in a study design, new or changed,
    without the models' view permissions: their own, and those they may change (``studies_for_user``
    at CHANGE: shared with them at change or pay, given ``studies.change_study``), never one they may
    only view. A view share lets its reader read the study, not build studies of their own on its
    reference data: that would read other splits and items than the shared study's, and outlast
    the share. A study of their own keeps lending its data once made (its owner may redraw it, and
    build another on it), whatever share or permission they made it with: what a collaborator
    designed while they could change the shared study stays theirs. ``study``: the study being
    changed, which counts as any other (kept for the callers' symmetry)."""
    if not _active(user):
        return Study.objects.none()
    changeable = studies_for_user(user=user, access=CHANGE).values("pk")
    return Study.objects.filter(Q(owner_id=user.pk) | Q(pk__in=changeable))


def datasets_for_design(*, user, study: Study | None = None) -> QuerySet[Dataset]:
    """The datasets ``user`` may use in a study design (``study``: the one being changed): all with
    ``studies.view_dataset``, else those a study of ``design_studies_for_user`` uses."""
    used = design_studies_for_user(user=user, study=study).values("dataset_id")
    return _all_or_used(user, Dataset, "studies.view_dataset", used)


def sources_for_design(*, user, study: Study | None = None) -> QuerySet[RationaleSource]:
    """The rationale sources ``user`` may use in a study design (``study``: the one being changed):
    all with ``studies.view_rationalesource``, else those a study of ``design_studies_for_user``
    lists."""
    used = Study.sources.through.objects.filter(
        study__in=design_studies_for_user(user=user, study=study)).values("rationalesource_id")
    return _all_or_used(user, RationaleSource, "studies.view_rationalesource", used)


def datasets_to_import_into(*, user=None) -> QuerySet[Dataset]:
    """The datasets a write acting for ``user`` may add to or change (an import's items, rationales
    and generalization questions; a new content row's dataset, ``studies.services.content``): those
    ``user`` may build on (``datasets_for_design``: every dataset with ``studies.view_dataset``, else
    those a study of their own or one they may change uses; None: the operator, every dataset). Never
    one they read only through a study shared with them to view: that share reads the study, it does
    not let its reader rewrite or add to the owner's dataset (an unshown item, a rationale of the
    owner's source), which the owner's next study would draw. Any other dataset is answered as one
    they may not see (``importers.upsert.dataset_get``, ``dataset_existing``)."""
    return Dataset.objects.all() if user is None else datasets_for_design(user=user)


def items_of_datasets_to_build_on(*, user=None) -> QuerySet[Item]:
    """The items ``user`` may build on: every item of a dataset they may write to
    (``datasets_to_import_into``; None: the operator, every item), as an import of rationales or
    questions finds its items. The rule a stored row's item is judged by
    (``studies.services.content.content_parent_refusals``): a row under an item of the user's own
    dataset stays theirs to edit or delete whoever's study draws that item, and one under an item of a
    dataset they read only through a view share never is. Picking an item for a new row by its id
    (``items_to_build_on``) also needs reading it."""
    if user is None:
        return Item.objects.all()
    return Item.objects.filter(dataset_id__in=datasets_to_import_into(user=user).values("pk"))


def items_to_build_on(*, user) -> QuerySet[Item]:
    """The items a new rationale or generalization question of ``user``'s may name by id (the admin's
    forms, a job's items): those they may build on (``items_of_datasets_to_build_on``) that they may also
    read for a job (``items_for_jobs``), so that naming one confirms nothing of an item only another
    researcher's study shows. Never an item of a dataset they read only through a view share: a row
    added to it would be shown by the owner's studies."""
    return items_for_jobs(user=user).filter(dataset_id__in=datasets_to_import_into(user=user).values("pk"))


GENERATOR_PERMISSIONS = {VIEW: "studies.view_questiongenerator", CHANGE: "studies.change_questiongenerator"}


def question_generators_for_user(*, user, access: str = VIEW) -> QuerySet[QuestionGenerator]:
    """The question generators ``user`` may reach with ``access`` (VIEW or CHANGE), by the rule of
    rationale sources (``sources_for_user`` and the shared content rule, ``studies.services.content``):
    a generator, like a source, is library data, so VIEW is all of them with
    ``studies.view_questiongenerator``, else only the user's own (``created_by``), as a source is
    read without its view permission only through what the user's own studies use. A generator with
    no owner (the operator's, or one made before generators had owners) is then read only with the
    view permission, as a source no study of the user's uses. CHANGE (edit, delete; never granted by
    a share) needs ``studies.change_questiongenerator`` and is the user's own generators plus the
    owner-less ones they read, as a source is changed by whoever reads it unless a study they may not
    change uses it: another researcher's generator is never theirs to change. Superusers reach every
    generator. Starting a job on one reads it (VIEW), as starting one on a source does."""
    if access not in GENERATOR_PERMISSIONS:
        raise ValueError(f"access must be one of view, change; got {access!r}")
    if not _active(user):
        return QuestionGenerator.objects.none()
    if user.is_superuser:
        return QuestionGenerator.objects.all()
    own = Q(created_by_id=user.pk)
    if access == VIEW:
        return _all_or_used(user, QuestionGenerator, GENERATOR_PERMISSIONS[VIEW],
                            QuestionGenerator.objects.filter(own).values("pk"))
    if not user.has_perm(GENERATOR_PERMISSIONS[CHANGE]):
        return QuestionGenerator.objects.none()
    ownerless = Q(created_by__isnull=True) if user.has_perm(GENERATOR_PERMISSIONS[VIEW]) else Q(pk__in=[])
    return QuestionGenerator.objects.filter(own | ownerless)


def _under_readable_parents(user, rows: QuerySet, parents: dict[str, tuple[str, Callable[..., QuerySet]]]) -> QuerySet:
    """``rows`` (of a model its view permission reads all of) less those whose parent the user may
    not read: for each ``name: (perm, selector)`` of ``parents``, the rows whose ``name`` is one of
    ``selector``'s (``items_for_user``, ``sources_for_user``), unless the user holds ``perm`` and so
    reads every parent (then no condition: a superuser's query stays a plain one). A row is shown with
    its parents (a rationale's item and source name, a question's original), so reading a row never
    reads more of its parents than their own selectors do. One subquery per parent."""
    for name, (perm, selector) in parents.items():
        if not _reads_all(user, perm):
            rows = rows.filter(**{f"{name}__in": selector(user=user).values("pk")})
    return rows


def rationales_for_user(*, user) -> QuerySet[Rationale]:
    """With ``studies.view_rationale``: every rationale whose item and source the user may read
    (``items_for_jobs``: a study they may see shows it, or it lies unshown in a dataset they may build
    on, such as their own train split; ``sources_for_user``: all of them only with ``studies.view_item``
    and ``studies.view_rationalesource``); otherwise those a visible study shows: its items' rationales
    from its own sources (whose item and source that study makes readable). A rationale is shown with
    its item (the admin labels and searches it by the item's id and question) and its source's name,
    so the permission that reads every rationale does not read the item or source of another
    researcher's study through it."""
    if not _reads_all(user, "studies.view_rationale"):
        studies = studies_for_user(user=user)
        shown = Rationale.objects.filter(
            Exists(Study.items.through.objects.filter(study__in=studies, item_id=OuterRef("item_id"),
                                                      study__sources=OuterRef("source_id")))
        ).values("pk")
        return _all_or_used(user, Rationale, "studies.view_rationale", shown)
    return _under_readable_parents(user, Rationale.objects.all(), {
        "item": ("studies.view_item", items_for_jobs),
        "source": ("studies.view_rationalesource", sources_for_user),
    })


def sources_counted_for_user(*, user) -> QuerySet[RationaleSource]:
    """The rationale sources ``user`` may read (``sources_for_user``), each with the number of its
    rationales they may read (``rationales_for_user``) or build on (a source of their designs,
    ``sources_for_design``, on an item they may use, ``items_for_jobs``): ``n_rationales``. Never the
    whole source's for a view share, which reads the rationales its study shows, not the source's
    rationales of items it does not draw. One correlated subquery."""
    readable = Rationale.objects.filter(
        Q(pk__in=rationales_for_user(user=user).values("pk"))
        | Q(source_id__in=sources_for_design(user=user).values("pk"), item_id__in=items_for_jobs(user=user).values("pk")))
    return sources_for_user(user=user).annotate(n_rationales=correlated_count(readable, "source"))


def generalization_questions_for_user(*, user) -> QuerySet[GeneralizationQuestion]:
    """With ``studies.view_generalizationquestion``: every generalization question whose item the user
    may read (``items_for_jobs``: shown by a study they may see, or unshown in a dataset they may build
    on, whose questions their question jobs draw as demonstrations; all of them only with
    ``studies.view_item``); otherwise the questions
    of the items a visible study draws. A question is shown with its item (the admin shows and
    searches the item's question as its original), so the permission that reads every question does
    not read the items of another researcher's study through it."""
    if not _reads_all(user, "studies.view_generalizationquestion"):
        return _all_or_used(user, GeneralizationQuestion, "studies.view_generalizationquestion",
                            _questions_studies_draw(user).values("pk"))
    return _under_readable_parents(user, GeneralizationQuestion.objects.all(),
                                   {"item": ("studies.view_item", items_for_jobs)})


def _questions_studies_draw(user) -> QuerySet[GeneralizationQuestion]:
    """The generalization questions of the items that a study ``user`` may see draws."""
    return GeneralizationQuestion.objects.filter(
        item__in=Study.items.through.objects.filter(study__in=studies_for_user(user=user)).values("item_id"))


def _questions_an_import_may_name(*, user) -> QuerySet[GeneralizationQuestion]:
    """The questions a generalization-question import's record may name for ``user`` to read it
    beyond its importer (``NAMED_CONTENT``; a reader with both the question and the item permission
    reads every record and is not asked): those of the items a study they may see draws. That is
    every question they read without the question permission (``generalization_questions_for_user``)
    and, with it but not the item one, all but those of the unshown items of datasets they build on
    (``items_for_jobs``): walking those here nests too deep for SQLite's parser (the admin's import
    list failed), so such a record stays its importer's and readers of every question and item."""
    return _questions_studies_draw(user) if _active(user) else GeneralizationQuestion.objects.none()


def genu_predictions_for_user(*, user) -> QuerySet[GenUPrediction]:
    """The Gen-U predictions whose generalization question and rationale source the user may both
    read (``generalization_questions_for_user``, ``sources_for_user``): a prediction's raw output and
    answerer model are its source's, so a hidden source's predictions stay hidden."""
    return GenUPrediction.objects.filter(
        generalization_question__in=generalization_questions_for_user(user=user).values("pk"),
        rationale_source__in=sources_for_user(user=user).values("pk"),
    )


# The imports whose record names a study in its summary (``summary["study"]``): the outcomes import
# (into an existing study) and the study bundle import (a new study). Every other kind imports into
# its dataset (``ImportRecord.dataset``): items, rationales, generalization questions.
STUDY_IMPORT_KINDS = ("outcomes", "bundle")
# The dataset imports whose rows a study shows (rationales, generalization questions): read beyond
# their importer by whoever reads their dataset (``datasets_for_user``) and every row they name
# (``NAMED_CONTENT``). Every other dataset import (the item imports: StrategyQA, OpenBookQA, a table)
# counts the whole dataset's rows of its file (``summary["splits"]``, its file's name and columns):
# it is read only by whoever may read the whole dataset (``datasets_for_design``: every dataset with
# ``studies.view_dataset``, else those a study of their own or one they may change uses), never
# through a view share, which reads the study's items, not the rest of its dataset.
SHOWN_CONTENT_IMPORT_KINDS = ("rationales", "generalization")


@dataclass(frozen=True)
class NamedContent:
    """What an import's record names beyond what it imported into (its dataset or study), which a
    reader of that may not read: the ``summary`` key holding the ids of those rows, the selector of
    the rows a user reads (or may find named) and the permissions that together read them all
    (``_all_or_used``'s rule, checked first to skip the walk: a generalization question is read
    with its item, so reading every one takes both permissions)."""

    key: str
    readable: Callable[..., QuerySet]
    read_all: tuple[str, ...]
    # The records of the kind made before their importer stored ``key`` that name none of these
    # rows anyway (no Q: every such record may name some).
    named_none: Q | None = None


# The imports whose record names rows of shared content, by kind. A rationales import names its
# sources (``per_source`` with their row counts, ``sources_created``, ``sources_with_highlights``); a
# generalization-question import counts its questions (``questions``, ``per_type``, ``originals``)
# and quotes those given twice with different answers (``conflicting_answers``: the question and its
# original). A study bundle import names the sources it made under a new name (``renamed["sources"]``),
# Gen-U's answerer sources among them, which the study does not list. Item imports name none, but they
# count the file's rows per split (``summary["splits"]``), unshown items included, which the dataset's
# own pages count only as far as the reader reads its items (``datasets_counted_for_user``): they are
# read beyond their importer only by a reader of the whole dataset (``SHOWN_CONTENT_IMPORT_KINDS``),
# not through a view share. An outcomes import names only sources its study lists.
NAMED_CONTENT = {
    "rationales": NamedContent("source_ids", sources_for_user, ("studies.view_rationalesource",)),
    "generalization": NamedContent("question_ids", _questions_an_import_may_name,
                                   ("studies.view_generalizationquestion", "studies.view_item")),
    "bundle": NamedContent("source_ids", sources_for_user, ("studies.view_rationalesource",),
                           named_none=~Q(summary__renamed__has_key="sources")),
}


class _HoldsIdOutside(Func):
    """Whether the JSON array ``json_field[key]`` of the row holds an id that ``ids`` (a queryset of
    primary keys) does not: an ``EXISTS`` over the array's elements, one correlated subquery. The
    ORM's JSON ``contains`` does not run on SQLite, so each database walks the array with its own
    function: ``json_each`` on SQLite, ``jsonb_array_elements_text`` on PostgreSQL (the field is
    ``jsonb``; a row without the key, or whose key is not an array, holds nothing). ``key`` is a
    constant of this module, never user input."""

    output_field = BooleanField()

    def __init__(self, json_field: str, key: str, ids: QuerySet):
        self.key = key
        super().__init__(F(json_field), Subquery(ids))

    def _parts(self, compiler):
        field_sql, field_params = compiler.compile(self.source_expressions[0])
        ids_sql, ids_params = compiler.compile(self.source_expressions[1])
        return field_sql, tuple(field_params), ids_sql, tuple(ids_params)

    def as_sqlite(self, compiler, connection, **extra_context):
        field_sql, field_params, ids_sql, ids_params = self._parts(compiler)
        return (f"EXISTS (SELECT 1 FROM json_each({field_sql}, %s) AS held "
                f"WHERE held.value NOT IN {ids_sql})", (*field_params, f"$.{self.key}", *ids_params))

    def as_postgresql(self, compiler, connection, **extra_context):
        field_sql, field_params, ids_sql, ids_params = self._parts(compiler)
        array = f"({field_sql} -> %s)"
        return (f"EXISTS (SELECT 1 FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof({array}) = 'array' "
                f"THEN {array} ELSE '[]'::jsonb END) AS held(value) WHERE held.value::bigint NOT IN {ids_sql})",
                (*field_params, self.key, *field_params, self.key, *ids_params))


def import_records_for_user(*, user) -> QuerySet[ImportRecord]:
    """The imports ``user`` may read: their own, and those whose target they may read through the
    visibility selectors: an outcomes or bundle import when they may see its study
    (``studies_for_user``), a rationales or generalization-question import when they may read its
    dataset (``datasets_for_user``), an item import only when they may read the whole dataset
    (``datasets_for_design``: with ``studies.view_dataset``, or through a study of their own or one
    they may change; never through a view share alone, ``SHOWN_CONTENT_IMPORT_KINDS``); superusers
    read all. ``studies.view_importrecord`` opens the feature (the admin's pages), never
    another researcher's rows: a record quotes its file's name, its counts and summary, what the
    importer saw. One query (the selectors are subqueries), for the API and the admin alike.

    An import whose record names rows of shared content (``NAMED_CONTENT``: a rationales import its
    sources, with their row counts; a generalization-question import its questions, counted and
    quoted; a bundle import the sources it renamed) is read by another researcher only when they may
    also read every row it names (the kind's selector: ``sources_for_user``; for questions, which
    are read with their items, ``_questions_an_import_may_name``, no wider than
    ``generalization_questions_for_user``): none of the ids its importer stored
    (``summary["source_ids"]``, ``summary["question_ids"]``) outside theirs. A record made before
    its importer stored them names its rows only by name or text (and a row can be renamed since),
    so it is read beyond its importer only by whoever reads every row of the kind (its view
    permissions: for questions, those of questions and items), unless it names none (a bundle
    import that renamed no source)."""
    if not _active(user):
        return ImportRecord.objects.none()
    if user.is_superuser:
        return ImportRecord.objects.all()
    return ImportRecord.objects.alias(target_study_id=import_record_study_id()).filter(
        Q(imported_by_id=user.pk)
        | ((Q(kind__in=STUDY_IMPORT_KINDS, target_study_id__in=studies_for_user(user=user).values("pk"))
            | Q(kind__in=SHOWN_CONTENT_IMPORT_KINDS, dataset_id__in=datasets_for_user(user=user).values("pk"))
            | (~Q(kind__in=STUDY_IMPORT_KINDS + SHOWN_CONTENT_IMPORT_KINDS)
               & Q(dataset_id__in=datasets_for_design(user=user).values("pk"))))
           & _names_only_readable(user))
    )


def import_record_study_id() -> Cast:
    """The study an import record names (``summary["study"]``: the study an outcome import filled or
    a bundle import made), as an id expression for queries."""
    return Cast(KeyTextTransform("study", "summary"), BigIntegerField())


def _names_only_readable(user) -> Q:
    """The records whose named content (``NAMED_CONTENT``) ``user`` reads all of: records of any
    other kind, and of each named kind those whose stored ids are all the user's to read."""
    readable = Q()
    for kind, named in NAMED_CONTENT.items():
        if all(_reads_all(user, perm) for perm in named.read_all):
            continue
        stored = Q(summary__has_key=named.key)
        names = stored & ~Q(_HoldsIdOutside("summary", named.key, named.readable(user=user).values("pk")))
        if named.named_none is not None:
            names |= ~stored & named.named_none
        readable &= ~Q(kind=kind) | names
    return readable


def import_jobs_for_user(*, user) -> QuerySet[ImportJob]:
    """Background imports: the user's own, and those that ended with an import record the user may
    read (``import_records_for_user``); superusers see all. Until it is done a job has written
    nothing of its target, and what it shows (its options, every bad row of its file, quoted) is
    its researcher's file, so another researcher's queued, running or failed job is not theirs to
    read."""
    if not _active(user):
        return ImportJob.objects.none()
    if user.is_superuser:
        return ImportJob.objects.all()
    return ImportJob.objects.filter(
        Q(created_by_id=user.pk) | Q(record_id__in=import_records_for_user(user=user).values("pk"))
    )


JOB_PERMISSIONS = {VIEW: "studies.view_generationjob", CHANGE: "studies.change_generationjob"}
JOB_START_PERMISSION = "studies.add_generationjob"


def generation_jobs_for_user(*, user, access: str = VIEW) -> QuerySet[GenerationJob]:
    """LM jobs belong to no study. VIEW (read a job's progress): all of them with
    ``studies.view_generationjob``, else the user's own. CHANGE (cancel, resume): all of them with
    ``studies.change_generationjob``, else the user's own while they may start jobs
    (``studies.add_generationjob``): resuming one spends compute as starting one does."""
    if access not in JOB_PERMISSIONS:
        raise ValueError(f"access must be one of view, change; got {access!r}")
    own = GenerationJob.objects.filter(created_by_id=getattr(user, "pk", None)).values("pk")
    if access == CHANGE and _active(user) and not user.is_superuser and not user.has_perm(JOB_START_PERMISSION):
        own = own.none()
    return _all_or_used(user, GenerationJob, JOB_PERMISSIONS[access], own)


def source_coverage(*, sources: QuerySet[RationaleSource], datasets: QuerySet[Dataset]) -> dict[int, set[tuple[int, str]]]:
    """For each of ``sources``, the (dataset id, split) pairs of ``datasets`` it has rationales for:
    what the study form's sources picker offers once a dataset and split are chosen. The form
    passes the sources and datasets it offers (the user's, ``sources_for_user`` and
    ``datasets_for_user``), so the page names no dataset the user may not see."""
    coverage: dict[int, set[tuple[int, str]]] = {}
    rows = (Rationale.objects.filter(source__in=sources.values("pk"), item__dataset__in=datasets.values("pk"))
            .order_by().values_list("source_id", "item__dataset_id", "item__split").distinct())
    for source_id, dataset_id, split in rows:
        coverage.setdefault(source_id, set()).add((dataset_id, split))
    return coverage


def sources_without_rationales(*, sources, dataset: Dataset, split: str) -> list[RationaleSource]:
    """Those of ``sources`` that have no rationale for an item of ``dataset`` in ``split``."""
    covered = set(Rationale.objects.filter(source__in=sources, item__dataset=dataset, item__split=split)
                  .order_by().values_list("source_id", flat=True).distinct())
    return [s for s in sources if s.pk not in covered]


def content_studies(*, model, pks: list[int]) -> dict[int, set[int]]:
    """For rows of shared content, the ids of the studies that use each (rows no study uses are
    left out): an item is used by the studies that drew it; a source by the studies that list it;
    a rationale by the studies that drew its item and list its source (what their units show); a
    generalization question by the generalization and question-validation studies that drew its
    item. A study's items and sources no longer change once it opens
    (``studies.services.studies.study_update``), so for an open or closed study this is exactly
    what its units show. Three queries for every 5,000 rows."""
    out: dict[int, set[int]] = {}
    for start in range(0, len(pks), 5000):  # bounded IN lists (SQLite's and PostgreSQL's parameter limits)
        out.update(_content_studies(model, pks[start:start + 5000]))
    return out


def _content_studies(model, pks: list[int]) -> dict[int, set[int]]:
    drawn = Study.items.through.objects
    listed = Study.sources.through.objects
    out: dict[int, set[int]] = {}
    if model is Item:
        for item_id, study_id in drawn.filter(item_id__in=pks).values_list("item_id", "study_id"):
            out.setdefault(item_id, set()).add(study_id)
    elif model is RationaleSource:
        for source_id, study_id in listed.filter(rationalesource_id__in=pks).values_list("rationalesource_id",
                                                                                          "study_id"):
            out.setdefault(source_id, set()).add(study_id)
    elif model is Rationale:
        pairs = list(Rationale.objects.filter(pk__in=pks).values_list("pk", "item_id", "source_id"))
        by_item: dict[int, set[int]] = {}
        for item_id, study_id in drawn.filter(item_id__in={p[1] for p in pairs}).values_list("item_id", "study_id"):
            by_item.setdefault(item_id, set()).add(study_id)
        by_source: dict[int, set[int]] = {}
        for source_id, study_id in listed.filter(rationalesource_id__in={p[2] for p in pairs}).values_list(
            "rationalesource_id", "study_id"
        ):
            by_source.setdefault(source_id, set()).add(study_id)
        for pk, item_id, source_id in pairs:
            both = by_item.get(item_id, set()) & by_source.get(source_id, set())
            if both:
                out[pk] = both
    elif model is GeneralizationQuestion:
        of_item = dict(GeneralizationQuestion.objects.filter(pk__in=pks).values_list("pk", "item_id"))
        by_item = {}
        for item_id, study_id in drawn.filter(
            item_id__in=set(of_item.values()),
            study__kind__in=[Study.Kind.GENERALIZATION, Study.Kind.QUESTION_VALIDATION],
        ).values_list("item_id", "study_id"):
            by_item.setdefault(item_id, set()).add(study_id)
        out = {pk: by_item[item_id] for pk, item_id in of_item.items() if item_id in by_item}
    return out
