"""The steps of each study kind, the questions they ask, and validation of one answer.

Shared by the answer service (what is allowed) and the selectors (what a page shows)."""
from __future__ import annotations

import unicodedata

from annotations.models import Annotation
from annotations.services.errors import InvalidAnswer
from lab.textchars import BIDI_CONTROLS
from studies.choices import as_label
from studies.models import Study

Step = Annotation.Step

STEPS_BY_KIND: dict[str, tuple[str, ...]] = {
    Study.Kind.UTILITY: (Step.BEFORE, Step.AFTER),
    Study.Kind.GENERALIZATION: (Step.BEFORE, Step.AFTER),
    Study.Kind.QUESTION_VALIDATION: (Step.VALIDATION,),
    Study.Kind.RATIONALE_PROPERTIES: (Step.PROPERTIES,),
}
ATTENTION_STEPS: tuple[str, ...] = (Step.ATTENTION,)

# SPEC section 7: the eight properties annotators mark per rationale (name, question asked).
RATIONALE_PROPERTIES: tuple[tuple[str, str], ...] = (
    ("grammatical", "Is the explanation grammatical and coherent?"),
    ("factual", "Is what it says factually correct?"),
    ("supports_label", "Does it support the predicted answer (association with the label)?"),
    ("contrast", "Does it say why the predicted answer is right rather than another one (contrast)?"),
    ("novel_info", "Does it add information that is not in the question?"),
    ("leakage", "Does it simply give the answer away (answer leakage)?"),
    ("hallucination", "Does it contain irrelevant or made-up content (hallucination)?"),
    ("redundant", "Does it contain relevant but redundant information?"),
)

VALIDATION_FIELDS: tuple[tuple[str, str], ...] = (
    ("well_formed", "Is the question well formed (clear, grammatical, answerable)?"),
    ("type_correct", "Is it of the claimed type?"),
    ("answer_correct", "Is the proposed answer right?"),
)

YES_NO = ("yes", "no")


def steps_for(*, kind: str, is_attention_check: bool) -> tuple[str, ...]:
    """The steps a claim's answers are stored under: an attention check's own (``ATTENTION``), a
    question's those of its study's kind."""
    return ATTENTION_STEPS if is_attention_check else STEPS_BY_KIND[kind]


# An attention check shows as the first step of its study's kind: its page names that step
# (``page_step``), and its answer, sent under that name, is stored as the check's own step
# (``answered_step``). So nothing a page or its form carries tells a check from a question before
# it is answered; these two are the one place that maps between the two names.

def page_step(*, kind: str, step: str) -> str:
    """The step a page names (its form's ``step``) for a claim at ``step``: a check's is its
    study's first step, any other its own."""
    return STEPS_BY_KIND[kind][0] if step == Step.ATTENTION else step


def answered_step(*, kind: str, is_attention_check: bool, step: str) -> str:
    """The claim's step an answer sent as ``step`` (a page's name for it, ``page_step``) is for:
    the first step of the study's kind, sent for a check, is the check's ``ATTENTION``; any other
    name stands for itself (a check's later step of the kind is refused as a question's is before
    its first answer: ``answer_order``)."""
    if is_attention_check and step == STEPS_BY_KIND[kind][0]:
        return Step.ATTENTION
    return step


def answer_order(*, kind: str, is_attention_check: bool) -> tuple[str, ...]:
    """A claim's steps in the order its page asks them, under the names they are stored as
    (``answered_step`` of each step of the kind): a check of a two-step kind is ``(ATTENTION,
    after)``, whose ``after`` never comes (the check is complete at its first)."""
    return tuple(answered_step(kind=kind, is_attention_check=is_attention_check, step=s) for s in STEPS_BY_KIND[kind])


def _pick(answer: str, labels: list[str], what: str) -> str:
    """``answer`` read as a label (``studies.choices.as_label``, the rule ``labels`` were read by:
    ``normalise_choices``) when it is one of ``labels``; else ``InvalidAnswer``."""
    answer = as_label(answer or "")
    if answer not in labels:
        if not answer:
            raise InvalidAnswer(f"Please choose an answer for {what}.")
        raise InvalidAnswer(f"'{answer[:50]}' is not one of the choices for {what} ({', '.join(labels)}).")
    return answer


FLAG_NOTE_MAX = 500
_FLAG_ON = {"1", "on", "yes", "true"}
_NOTE_KEPT_CONTROLS = {"\n", "\t"}


def _flag_note(text: str) -> str:
    """The note as stored: without control characters (Unicode category Cc, except newline and
    tab) and bidirectional controls (``lab.textchars.BIDI_CONTROLS``; other format characters stay), which would hide or reorder what a
    researcher reads of it on a page or in an export; without surrounding white space; its first
    ``FLAG_NOTE_MAX`` characters (reading stops there)."""
    kept: list[str] = []
    for char in text:
        if char in BIDI_CONTROLS or (char not in _NOTE_KEPT_CONTROLS and unicodedata.category(char) == "Cc"):
            continue
        if kept or not char.isspace():
            kept.append(char)
            if len(kept) == FLAG_NOTE_MAX:
                break
    return "".join(kept).rstrip()


def clean_flag(payload: dict) -> dict:
    """A worker's optional report that the question or the explanation is broken (no right
    answer, nonsense, offensive text). Stored with the answer as ``{"flag": True, "flag_note": ...}``;
    it earns the flagged-error bonus of the study protocol. No report stores ``{}``. The note keeps
    its first ``FLAG_NOTE_MAX`` characters once control and format characters are dropped
    (``_flag_note``; newlines and tabs stay)."""
    flag = payload.get("flag")
    if flag is True or str(flag or "").strip().lower() in _FLAG_ON:
        return {"flag": True, "flag_note": _flag_note(str(payload.get("flag_note", "") or ""))}
    return {}


def clean_answer(*, step: str, answer: str, payload: dict | None, labels: list[str],
                 proposed_answer: str | None = None) -> tuple[str, dict]:
    """Validate one step's answer and return the normalised (answer, payload) to store.

    ``labels`` are the allowed choice labels of the question asked (answer steps, attention
    checks, the corrected answer of a validation). ``proposed_answer``: the answer a validation
    judges (its generalization question's ``answer``); a judge who calls it wrong must correct it
    to another choice, so a corrected answer equal to it is refused (the page does not offer it).
    None where no proposed answer is known."""
    payload = dict(payload or {})
    if step == Step.ATTENTION:
        return _pick(answer, labels, "this question"), {}
    if step in (Step.BEFORE, Step.AFTER):
        return _pick(answer, labels, "this question"), clean_flag(payload)
    if step == Step.VALIDATION:
        clean = {}
        for name, question in VALIDATION_FIELDS:
            clean[name] = _pick(str(payload.get(name, "")), list(YES_NO), f"'{question}'")
        corrected = str(payload.get("corrected_answer", "") or "")
        if clean["answer_correct"] == "no":
            clean["corrected_answer"] = _pick(corrected, labels, "the corrected answer")
            if proposed_answer is not None and clean["corrected_answer"] == proposed_answer:
                raise InvalidAnswer(
                    f"The corrected answer '{proposed_answer[:50]}' is the proposed answer you called wrong: "
                    "choose the answer that is right instead, or answer that the proposed answer is right."
                )
        else:
            clean["corrected_answer"] = ""
        verdict = "valid" if all(clean[name] == "yes" for name, _ in VALIDATION_FIELDS) else "invalid"
        return verdict, clean
    if step == Step.PROPERTIES:
        clean = {name: _pick(str(payload.get(name, "")), list(YES_NO), f"'{question}'")
                 for name, question in RATIONALE_PROPERTIES}
        return "", clean
    raise InvalidAnswer(f"Unknown step '{step}'.")


def property_marks(payload) -> dict[str, bool]:
    """The marks of one stored properties answer (``Step.PROPERTIES``), as ``{name: bool}``: the
    one reader of the payload :func:`clean_answer` stores, ``{name: "yes" | "no"}`` over the names
    of ``RATIONALE_PROPERTIES``. A name missing or with another value gives no mark; any other key
    is ignored (a bundle's copy may carry what the app never writes)."""
    if not isinstance(payload, dict):
        return {}
    return {name: payload[name] == "yes" for name, _ in RATIONALE_PROPERTIES if payload.get(name) in YES_NO}
