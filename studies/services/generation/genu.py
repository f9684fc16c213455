"""Gen-U answer jobs: F^I and F^IR answer the generalization questions of the items that have a
rationale from the source; one stored prediction per (question, source, answerer). The answering
itself is :mod:`studies.services.genu`'s."""
from __future__ import annotations

from studies.models import GenerationFailure, GenerationJob, GenUPrediction, Rationale, RationaleSource

from .common import (
    BatchOutput,
    GenerationError,
    ItemHandler,
    Prepared,
    ordered_item_ids,
    store_failures,
)


class GenUHandler(ItemHandler):
    kind = GenerationJob.Kind.GENU_ANSWERS
    params_accepted = frozenset({"answerer_i", "answerer_ir", "only_valid"})

    def prepare(self, *, source, generator, dataset, split, item_ids, limit, params):
        from studies.services.genu import ROLES, genu_answerer_check, genu_questions

        if source is None:  # any source: imported rationales have a Gen-U as much as generated ones
            raise GenerationError("choose the rationale source")
        for role, key in ROLES.items():
            answerer = RationaleSource.objects.filter(pk=params.get(key)).first()
            params[key] = genu_answerer_check(answerer, role).pk
        params["only_valid"] = bool(params.get("only_valid", True))
        ids = ordered_item_ids(dataset=dataset, split=split, item_ids=item_ids, limit=None)
        with_rationale = set(Rationale.objects.filter(source=source, item_id__in=ids).values_list("item_id", flat=True))
        questions = genu_questions(item_ids=with_rationale, only_valid=params["only_valid"])
        with_questions = set(questions.values_list("item_id", flat=True))
        ids = [i for i in ids if i in with_questions][: limit or None]
        if not ids:
            which = "validated generalization questions" if params["only_valid"] else "generalization questions"
            hint = (" (validate questions with a question-validation study or in the admin, or choose to run on "
                    "unvalidated questions)" if params["only_valid"] else "")
            raise GenerationError(f"no item has both a rationale from {source.name!r} and {which} to answer{hint}")
        return Prepared(item_ids=ids, params=params, total=len(ids), split=split)

    def _questions(self, job, ids):
        from studies.services.genu import genu_questions

        return genu_questions(item_ids=ids, only_valid=job.params.get("only_valid", True))

    def processed_among(self, job, ids):
        questions = list(self._questions(job, ids).values_list("pk", "item_id"))
        have = set(GenUPrediction.objects.filter(rationale_source_id=job.source_id,
                                                 generalization_question_id__in=[q for q, _ in questions])
                   .values_list("generalization_question_id", "answerer"))
        incomplete = {item for q, item in questions if (q, "I") not in have or (q, "IR") not in have}
        return {i for i in ids if i not in incomplete}

    def generate(self, job, item_ids):
        from studies.services.genu import ROLES, genu_answer

        source = job.source
        rationales = {r.item_id: r.text for r in Rationale.objects.filter(source=source, item_id__in=item_ids)}
        questions = list(self._questions(job, item_ids).filter(item_id__in=rationales)
                         .select_related("item__dataset").order_by("item_id", "pk"))
        have = set(GenUPrediction.objects.filter(rationale_source=source, generalization_question__in=questions)
                   .values_list("generalization_question_id", "answerer"))
        by_id = {q.pk: q for q in questions}
        out = BatchOutput(units=len(item_ids))
        for role, key in ROLES.items():
            answerer = RationaleSource.objects.get(pk=job.params[key])
            todo = [q for q in questions if (q.pk, role) not in have]
            answers = genu_answer(questions=todo, answerer=answerer, role=role,
                                  rationales=[rationales[q.item_id] for q in todo] if role == "IR" else ())
            for answer in answers:
                question = by_id[answer.question_id]
                out.predictions.append(GenUPrediction(
                    generalization_question=question, rationale_source=source, answerer=role,
                    answerer_model=answerer.model_name_or_path, predicted_answer=answer.predicted,
                    correct=answer.correct, raw_output=answer.raw,
                ))
                if not answer.parsed:
                    out.failures.append(GenerationFailure(
                        job=job, item=question.item, unit=f"{role}:q{question.pk}", raw_output=answer.raw,
                        reason=f"{answer.reason} (the question is left out of Gen-U)"))
        return out

    def store(self, job, output):
        existing = set(GenUPrediction.objects.filter(
            rationale_source_id=job.source_id,
            generalization_question_id__in={p.generalization_question_id for p in output.predictions},
        ).values_list("generalization_question_id", "answerer"))
        GenUPrediction.objects.bulk_create(
            [p for p in output.predictions if (p.generalization_question_id, p.answerer) not in existing])
        store_failures(job, output.failures)
