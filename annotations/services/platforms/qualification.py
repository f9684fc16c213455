"""MTurk qualification types: the study's graded test (QuestionForm + AnswerKey, scored by MTurk)
or a type the app grants to workers who passed its own test, and the requirements a HIT carries."""
from __future__ import annotations

import math

from django.conf import settings

from annotations.models import MTurkQualificationType, QualificationGrant
from annotations.platforms import get_platform
from annotations.platforms.mturk import (
    MTurkPlatform,
    answer_key_xml,
    approval_rate_requirement,
    custom_requirement,
    locale_requirement,
    question_form_xml,
)
from annotations.services.payments import CallSpec, platform_call_execute
from studies.choices import normalise_choices
from studies.models import Platform, Study

from .calls import reconciler
from .common import OP, actor, participant_pseudonym
from .tokens import qualification_type_name


def mturk_requirements(*, study: Study, options: dict, qualification: MTurkQualificationType | None) -> list[dict]:
    countries = options.get("locales", settings.RL_MTURK_LOCALES)
    min_approval = int(options.get("min_approval_rate", settings.RL_MTURK_MIN_APPROVAL_RATE))
    requirements = []
    if countries:
        requirements.append(locale_requirement(list(countries)))
    if min_approval:
        requirements.append(approval_rate_requirement(min_approval))
    if qualification is not None:
        requirements.append(custom_requirement(qualification.qualification_type_id, qualification.min_score))
    return requirements


def qualification_test_questions(study: Study) -> tuple[str, list[dict], int] | None:
    """(instructions, questions, minimum percentage) of the study's qualification test, or None.
    Each question's choices as ``[{"label", "text"}]`` (``normalise_choices``: the study page stores
    plain labels, and no choices mean yes / no), as the QuestionForm needs them."""
    test = getattr(study, "qualification_test", None)
    if test is None:
        return None
    questions = [
        {"id": f"q{q.pk}", "text": q.question, "choices": normalise_choices(q.choices), "correct": q.correct_answer}
        for q in test.questions.all()
    ]
    if not questions:
        return None
    min_score = math.ceil(100 * test.pass_mark / len(questions))
    return test.instructions, questions, min(100, min_score)


def mturk_qualification_ensure(*, study: Study, user=None, kind: str = MTurkQualificationType.Kind.GRADED_TEST,
                               platform: MTurkPlatform | None = None) -> MTurkQualificationType | None:
    """The study's MTurk qualification type, created once per endpoint. A graded test needs the
    study's qualification test (questions with correct answers); ``app_granted`` makes a type the
    app grants with ``mturk_qualification_grant_passed``. A graded type, once made, is reused as it
    is: from then on the app's test no longer changes (``qualification.qualification_test_taken``)."""
    platform = platform or get_platform(Platform.MTURK)
    existing = MTurkQualificationType.objects.filter(study=study, kind=kind, endpoint=platform.endpoint).first()
    if existing is not None:
        return existing
    name = qualification_type_name(study=study, kind=kind)
    if kind == MTurkQualificationType.Kind.GRADED_TEST:
        test = qualification_test_questions(study)
        if test is None:
            return None
        instructions, questions, min_score = test
        params = {"test_xml": question_form_xml(instructions=instructions, questions=questions),
                  "answer_key_xml": answer_key_xml(questions=questions)}
    else:
        min_score, params = 1, {}
    call = platform_call_execute(
        spec=CallSpec(platform=Platform.MTURK, operation=OP.CREATE_QUALIFICATION,
                      idempotency_key=f"{Platform.MTURK}:qualtype:{platform.endpoint}:{study.pk}:{kind}",
                      request_summary={"name": name, "kind": kind, "min_score": min_score},
                      user=actor(user), study=study),
        send=lambda: {"QualificationTypeId": platform.create_qualification_type(
            name=name, description=f"Qualification for the study {study.name[:150]}", **params)},
        reconcile=reconciler(platform),
    )
    qualification, _ = MTurkQualificationType.objects.get_or_create(
        study=study, kind=kind, endpoint=platform.endpoint,
        defaults={"qualification_type_id": call.response["QualificationTypeId"], "name": name, "min_score": min_score},
    )
    return qualification


def mturk_qualification_grant_passed(*, study: Study, user=None, platform: MTurkPlatform | None = None) -> int:
    """Grant the study's app-granted MTurk qualification to every MTurk worker who passed the
    app's qualification test. Each worker is granted once (audited); returns how many calls."""
    platform = platform or get_platform(Platform.MTURK)
    qualification = mturk_qualification_ensure(study=study, user=user, kind=MTurkQualificationType.Kind.APP_GRANTED,
                                               platform=platform)
    granted = 0
    grants = QualificationGrant.objects.filter(study=study, passed=True, participant__platform=Platform.MTURK)
    for grant in grants.select_related("participant"):
        worker_id, worker = grant.participant.external_id, participant_pseudonym(grant.participant)
        platform_call_execute(
            spec=CallSpec(platform=Platform.MTURK, operation=OP.ASSOCIATE_QUALIFICATION,
                          idempotency_key=f"{Platform.MTURK}:qualgrant:{qualification.qualification_type_id}:{worker}",
                          request_summary={"worker": worker, "value": 100}, user=actor(user), study=study,
                          redact={worker_id: worker}),
            send=lambda worker_id=worker_id: platform.associate_qualification(
                qualification_type_id=qualification.qualification_type_id, worker_id=worker_id, value=100),
            reconcile=lambda call: False,  # granting again is harmless
        )
        granted += 1
    return granted
