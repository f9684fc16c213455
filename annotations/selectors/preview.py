"""Reads of the researcher's preview (``annotations.views.preview``): the content of one question
of a preview task, read through the study the preview is of, and the study's qualification test as
a new worker is shown it before the task's first question.

A preview link carries its task signed (``["u", item, source, rationale, generalization question]``
ids, 0 for none, or ``["a", attention check id]``), but the study may have changed since the link
was made: a draft's sources, items and checks come and go, and a row may be deleted. So no id of
the link is read bare: each row is read as the study's (its items, its sources, its attention
checks; the rationale of that item and source; a generalization question of that item), and a row
that is not, or no longer exists, is ``PreviewOutdated``, never shown."""
from __future__ import annotations

from annotations.models import AttentionCheck, Claim, QualificationTest, Unit
from annotations.selectors import qualification_page_questions
from studies.models import GeneralizationQuestion, Rationale, Study

# The kinds whose questions are generalization questions (``studies.design``), and the one whose
# units have no rationale source.
GENQ_KINDS = (Study.Kind.GENERALIZATION, Study.Kind.QUESTION_VALIDATION)
SOURCELESS_KINDS = (Study.Kind.QUESTION_VALIDATION,)


class PreviewOutdated(Exception):
    """A preview link names a row that is not (or no longer) the study's; the message names it."""


def preview_qualification(*, study: Study) -> tuple[QualificationTest, list[dict]] | None:
    """The qualification test of ``study`` as it is now and its questions as its page shows them
    (``selectors.qualification_page_questions``, as the worker's page reads them), or None when the
    study has none. A new worker's task waits for the test (``assignment._qualification_pending``:
    they have not passed it), so the preview shows it between the consent and the first question."""
    test = QualificationTest.objects.filter(study=study).prefetch_related("questions").first()
    return None if test is None else (test, qualification_page_questions(test))


def preview_claim(*, study: Study, entry: list, number: int) -> Claim:
    """An unsaved claim with what a step page shows, for ``entry`` (question ``number``) of a
    preview task of ``study``, every row read through ``study`` as it is now. Raises
    ``PreviewOutdated`` naming the first row that is not the study's, or that the study's kind
    needs and the entry lacks (the kind of a draft may have changed since)."""
    where = f"question {number} of the link"
    try:
        if entry[0] == "a":
            (_, check_id) = entry
            check = AttentionCheck.objects.filter(study=study, pk=check_id).first()
            if check is None:
                raise PreviewOutdated(f"{where}: attention check {check_id} is no longer one of the study's checks")
            return Claim(attention_check=check)
        (_, item_id, source_id, rationale_id, genq_id) = entry
    except (TypeError, ValueError, IndexError) as error:  # not a task entry this code ever signed
        raise PreviewOutdated(f"{where}: not a question of a preview task") from error
    item = study.items.filter(pk=item_id).first()
    if item is None:
        raise PreviewOutdated(f"{where}: item {item_id} is no longer one of the study's items")
    source = study.sources.filter(pk=source_id).first() if source_id else None
    if source_id and source is None:
        raise PreviewOutdated(f"{where}: rationale source {source_id} is no longer one of the study's sources")
    if source is None and study.kind not in SOURCELESS_KINDS:
        raise PreviewOutdated(f"{where}: it has no rationale source, which a {_kind(study)} study needs")
    rationale = (Rationale.objects.filter(pk=rationale_id, item=item, source=source).first()
                 if rationale_id and source is not None else None)
    if rationale_id and rationale is None:
        raise PreviewOutdated(f"{where}: rationale {rationale_id} is no longer the rationale of item {item_id} "
                              f"from source {source_id}")
    genq = GeneralizationQuestion.objects.filter(pk=genq_id, item=item).first() if genq_id else None
    if genq_id and genq is None:
        raise PreviewOutdated(f"{where}: generalization question {genq_id} is no longer one of item {item_id}'s")
    if genq is None and study.kind in GENQ_KINDS:
        raise PreviewOutdated(f"{where}: it has no generalization question, which a "
                              f"{_kind(study)} study needs")
    return Claim(unit=Unit(item=item, source=source, rationale=rationale, generalization_question=genq))


def _kind(study: Study) -> str:
    return Study.Kind(study.kind).label.lower()
