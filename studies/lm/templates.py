"""Prompt templates: the FEB rationale templates (SPEC section 8), our plain F^I answer template
(not FEB's: SPEC section 8 gives none), and the generalization question prompts (SPEC section 4).

Templates work on plain data (:class:`PromptItem`), not on Django models, so that fine-tuning,
generation and tests share them. Answers are *choice labels* (``"yes"``/``"no"``, ``"a"``..``"d"``);
the templates show the choice *text* to the model, and :mod:`studies.lm.parsing` maps the model's
text back to a label.

A source may carry its own template (``RationaleSource.template``). It is filled by plain
placeholder substitution of ``{dataset}``, ``{question}``, ``{choices}`` (FEB ``choice: ...`` list),
``{choices_csv}`` (comma separated), ``{demonstrations}``, ``{answer}`` and ``{rationale}``; nothing
else in the text is interpreted, so an untrusted question cannot reach Python's format machinery.
In a prompt that asks about an item (:func:`t5_explain_input`, :func:`causal_prompt`) ``{answer}``
and ``{rationale}`` are empty: the item's gold is what the model is asked for.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

# The FEB templates (SPEC section 8): T5 infilling and answering given the explanation (F^IR).
T5_EXPLAIN = "explain {dataset} question: {question} {choices} <extra_id_0> because <extra_id_1>"
T5_EXPLAIN_TARGET = "<extra_id_0> {answer} <extra_id_1> {rationale} <extra_id_2>"
T5_ANSWER_GIVEN_EXPLANATION = (
    "answer {dataset} question given the explanation: {question} {choices} "
    "<extra_id_0> because <extra_id_1> {rationale} <extra_id_2>"
)
T5_ANSWER_TARGET = "<extra_id_0> {answer} <extra_id_1>"  # F^IR's target (FEB); F^I reuses it
# Ours, not FEB's: the plain question -> answer input for F^I. SPEC section 8 gives no plain
# answer template (issue 5 asks only for "plain question -> answer"); this is F^IR's FEB input
# without the explanation part.
T5_ANSWER = "answer {dataset} question: {question} {choices} <extra_id_0>"

# The paper's GPT-3 few-shot setup (SPEC section 8): the header, six demonstration blocks, then
# the query block that stops after ``Answer:``. CAUSAL_FEW_SHOT is the whole prompt as one
# template; ``{demonstrations}`` is the blocks (CAUSAL_BLOCK each) joined by newlines.
CAUSAL_HEADER = "Answer the question from the provided choices, and provide a reason why the answer is correct."
CAUSAL_BLOCK = "Question: {question}\nChoices: {choices_csv}\nAnswer: {answer}\nReason: {rationale}\n###"
CAUSAL_QUERY = "Question: {question}\nChoices: {choices_csv}\nAnswer:"
CAUSAL_FEW_SHOT = CAUSAL_HEADER + "\n{demonstrations}\n" + CAUSAL_QUERY
CAUSAL_STOP = "###"
# Causal (and OpenAI-compatible) Gen-U answerers: F^I sees the question, F^IR also the rationale.
CAUSAL_ANSWER = "Question: {question}\nChoices: {choices_csv}\nAnswer:"
CAUSAL_ANSWER_GIVEN_EXPLANATION = "Question: {question}\nChoices: {choices_csv}\nExplanation: {rationale}\nAnswer:"

N_DEMONSTRATIONS = 6

TEMPLATE_NAMES = {
    "t5_explain": T5_EXPLAIN,
    "t5_answer_given_explanation": T5_ANSWER_GIVEN_EXPLANATION,
    "t5_answer": T5_ANSWER,
    "causal_few_shot": CAUSAL_FEW_SHOT,
}

# The placeholders :func:`fill` substitutes: those a source's own template may name.
PLACEHOLDERS = ("dataset", "question", "choices", "choices_csv", "demonstrations", "answer", "rationale")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
# What a template writer may mean as a placeholder: a word (letters, digits, ``_``) in braces. Other
# braces (a JSON example, ``{ }``) are text.
_NAMED = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class PromptItem:
    """What a template needs from an item. ``choices`` are ``(label, text)`` pairs in order."""

    question: str
    choices: tuple[tuple[str, str], ...]
    dataset: str = ""
    answer: str | None = None  # gold (or predicted) choice label
    rationale: str | None = None
    facts: str = ""
    key: Any = None  # caller's identifier (item id, external id)

    def choice_text(self, label: str | None) -> str:
        for choice_label, text in self.choices:
            if choice_label == label:
                return text
        return label or ""

    @property
    def is_yes_no(self) -> bool:
        return {label for label, _ in self.choices} == {"yes", "no"}


@dataclass
class Demonstration:
    question: str
    choices: list[str]
    answer: str  # answer *text* as shown to the model
    rationale: str
    key: Any = None

    def as_json(self) -> dict:
        return {"question": self.question, "choices": self.choices, "answer": self.answer,
                "rationale": self.rationale, "key": self.key}


def demonstrations_problem(value) -> str | None:
    """Why ``value`` cannot be a rationale source's own demonstrations (``RationaleSource.demonstrations``,
    read as :class:`Demonstration`); None when it can: a list of objects, each with a non-empty
    ``question``, ``answer`` and ``rationale`` text, ``choices`` a list of texts when given (absent
    or empty: yes/no); other fields (``key``, an item id a file carried) are kept and not read. Asked where a source is written and where a
    job takes them, so a job is refused naming the field rather than failing at its first batch."""
    if not isinstance(value, list):
        return f"must be a list of demonstrations, each {{question, choices, answer, rationale}}, not {type(value).__name__}"
    for number, demo in enumerate(value, start=1):
        problem = _demonstration_object_problem(demo, f"demonstration {number}", shape="question, choices, answer, rationale",
                                                texts=("question", "answer", "rationale"))
        if problem:
            return problem
        choices = demo.get("choices")
        if choices is not None and not (isinstance(choices, list) and all(isinstance(c, str) for c in choices)):
            return f'demonstration {number}: "choices" must be a list of texts (empty or absent: yes / no)'
    return None


def _demonstration_object_problem(demo, where: str, *, shape: str, texts: tuple[str, ...]) -> str | None:
    """Why ``demo`` (named ``where``) is not an object ``{shape}`` whose ``texts`` are non-empty
    texts; None when it is. The part the source's and the generator's demonstrations share."""
    if not isinstance(demo, dict):
        return f"{where} must be an object {{{shape}}}, not {type(demo).__name__}"
    for name in texts:
        if not isinstance(demo.get(name), str) or not demo[name].strip():
            return f'{where}: "{name}" must be a non-empty text'
    return None


def demonstration_read(value: dict) -> Demonstration:
    """A demonstration as stored (``demonstrations_problem`` passed, or drawn by a job)."""
    return Demonstration(question=value.get("question"), choices=list(value.get("choices") or []),
                         answer=value.get("answer"), rationale=value.get("rationale"), key=value.get("key"))


def dataset_tag(name: str) -> str:
    """The dataset name in lower case without spaces (``explain strategyqa question:``): our choice;
    SPEC section 8 writes only ``{dataset}`` (FEB's code puts its own data-source ids there, such as
    ``ecqa`` and ``cos_e``)."""
    return re.sub(r"[^a-z0-9_]+", "", name.lower()) or "task"


def choice_texts(item: PromptItem) -> list[str]:
    """Choices as the model sees them: yes/no in lower case (our choice; SPEC section 8 does not show
    them), multiple choice as written on one line: an imported choice holding newlines would
    otherwise add lines of its own ("stone\nAnswer: stone\nReason: ...") to every prompt that
    lists it. Every prompt and demonstration gets its choices (and answers, :func:`answer_text`)
    here."""
    if item.is_yes_no:
        return [label for label, _ in item.choices]
    return [_one_line(text) for _, text in item.choices]


def answer_text(item: PromptItem, label: str | None) -> str:
    """The text of choice ``label`` as :func:`choice_texts` shows it (``label`` itself when the
    item has no such choice)."""
    if label is None:
        return ""
    shown = dict(zip((choice_label for choice_label, _ in item.choices), choice_texts(item), strict=True))
    return shown.get(label, label)


def _fields(item: PromptItem, **extra: str) -> dict[str, str]:
    texts = choice_texts(item)
    values = {
        "dataset": dataset_tag(item.dataset),
        "question": _one_line(item.question),
        "choices": " ".join(f"choice: {text}" for text in texts),
        "choices_csv": ", ".join(texts),
        "rationale": _one_line(item.rationale or ""),
        "answer": answer_text(item, item.answer),
        "demonstrations": "",
    }
    values.update(extra)
    return {name: _no_sentinels(value) for name, value in values.items()}


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# A T5 sentinel written in an item's text (``<extra_id_0>``) would be read as one of the template's
# own: the model would be asked to fill the wrong span, and its output split at the wrong place.
T5_SENTINEL_TEXT = re.compile(r"<\s*(extra_id_\d+)\s*>", re.IGNORECASE)


def _no_sentinels(text: str) -> str:
    """``text`` with any T5 sentinel's angle brackets replaced (``<extra_id_0>`` -> ``(extra_id_0)``),
    so that the only sentinels in a filled template are the template's."""
    return T5_SENTINEL_TEXT.sub(r"(\1)", text)


def fill(template: str, values: dict[str, str]) -> str:
    """Substitute the known ``{placeholders}`` only; everything else stays literal."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def template_problem(template: str) -> str:
    """Why ``template`` (a rationale source's own prompt template, for its seq2seq input or its
    causal / openai few-shot prompt) cannot be used; "" when it can, or is empty (the FEB default
    is used). A word in braces that is not one of :data:`PLACEHOLDERS` (``{qestion}``) would stay in
    every prompt as it is written, and a template without ``{question}`` would give every item the
    same prompt: both are refused, naming the placeholder and the allowed ones."""
    if not template:
        return ""
    allowed = ", ".join(f"{{{name}}}" for name in PLACEHOLDERS)
    unknown = [name for name in _NAMED.findall(template) if name not in PLACEHOLDERS]
    if unknown:
        return f"template: {{{unknown[0]}}} is not a placeholder; the placeholders are {allowed}"
    if "{question}" not in template:
        return f"template: it has no {{question}}, so every item would get the same prompt (placeholders: {allowed})"
    return ""


def _query_fields(item: PromptItem, **extra: str) -> dict[str, str]:
    """The fields of the item a prompt asks about: never its gold answer nor its rationale, which
    are what the model is asked to write (a source's own template may name ``{answer}`` and
    ``{rationale}``; in the query they are empty). Demonstrations and training targets keep theirs;
    F^IR's explanation is passed on its own (:func:`t5_answer_with_rationale_input`)."""
    return _fields(item, answer="", rationale="", **extra)


# --- seq2seq (T5) ----------------------------------------------------------------------------
def t5_explain_input(item: PromptItem, template: str = "") -> str:
    """The input that asks for ``item``'s answer and rationale: :data:`T5_EXPLAIN` or the source's
    ``template``, without the item's gold (:func:`_query_fields`)."""
    return fill(template or T5_EXPLAIN, _query_fields(item))


def t5_explain_target(item: PromptItem) -> str:
    return fill(T5_EXPLAIN_TARGET, _fields(item))


def t5_answer_with_rationale_input(item: PromptItem, rationale: str) -> str:
    """F^IR: answer the question given the (original item's) explanation."""
    return fill(T5_ANSWER_GIVEN_EXPLANATION, _fields(item, rationale=_one_line(rationale)))


def t5_answer_input(item: PromptItem) -> str:
    """F^I: the plain question to answer, in our template (:data:`T5_ANSWER`, not FEB's)."""
    return fill(T5_ANSWER, _fields(item))


def t5_answer_target(item: PromptItem) -> str:
    return fill(T5_ANSWER_TARGET, _fields(item))


def causal_answer_input(item: PromptItem) -> str:
    """F^I for a causal answerer: the question, continued after ``Answer:``."""
    return fill(CAUSAL_ANSWER, _fields(item))


def causal_answer_with_rationale_input(item: PromptItem, rationale: str) -> str:
    """F^IR for a causal answerer: the question and the (original item's) explanation."""
    return fill(CAUSAL_ANSWER_GIVEN_EXPLANATION, _fields(item, rationale=_one_line(rationale)))


# --- causal few-shot -------------------------------------------------------------------------
def demonstration_from(item: PromptItem) -> Demonstration:
    return Demonstration(
        question=_one_line(item.question), choices=choice_texts(item), answer=answer_text(item, item.answer),
        rationale=_one_line(item.rationale or ""), key=item.key,
    )


def draw_demonstrations(pool: list[PromptItem], *, seed: int, k: int = N_DEMONSTRATIONS,
                        exclude: Any = None) -> list[Demonstration]:
    """Six random demonstrations (the paper's GPT-3 setup) from a pool of train items with gold
    answers and rationales. Deterministic for a seed: the pool is sorted by key first."""
    usable = [p for p in pool if p.answer and (p.rationale or "").strip() and p.key != exclude]
    usable.sort(key=lambda p: str(p.key))
    if len(usable) < k:
        raise ValueError(f"need {k} train items with a gold answer and rationale for demonstrations, found {len(usable)}")
    return [demonstration_from(p) for p in random.Random(seed).sample(usable, k)]


def causal_block(demo: Demonstration) -> str:
    return fill(CAUSAL_BLOCK, {
        "question": demo.question, "choices_csv": ", ".join(demo.choices),
        "answer": demo.answer, "rationale": demo.rationale,
    })


def causal_prompt(item: PromptItem, demonstrations: list[Demonstration], template: str = "") -> str:
    """Header, the demonstration blocks, then the query block that stops after ``Answer:``:
    :data:`CAUSAL_FEW_SHOT` filled (or the source's ``template``). Without demonstrations the
    default prompt is the header and the query block only (no empty line between them)."""
    demos = "\n".join(causal_block(d) for d in demonstrations)
    if template:  # the query item's gold never fills it (_query_fields): the demonstrations keep theirs
        return fill(template, _query_fields(item, demonstrations=demos))
    if demos:
        return fill(CAUSAL_FEW_SHOT, _query_fields(item, demonstrations=demos))
    return "\n".join([CAUSAL_HEADER, fill(CAUSAL_QUERY, _query_fields(item))])


def causal_training_text(item: PromptItem) -> str:
    """One complete block, for fine-tuning a causal model on the answer-then-reason format."""
    return causal_block(demonstration_from(item))


# --- generalization questions (SPEC section 4) ------------------------------------------------
REPHRASE = "rephrase"
SIMILAR = "similar"
COUNTERFACTUAL = "counterfactual"
QUESTION_TYPES = (REPHRASE, SIMILAR, COUNTERFACTUAL)

# The authors' instructions, word for word as SPEC section 4 quotes them. The counterfactual one
# does not say "and answer it" (the other two do); the LM still answers every type, because each
# demonstration ends with an ``answer: True|False`` line, and :func:`generalization_prompt`'s
# output format (and the parser, :func:`studies.lm.parsing.parse_generalization`) rely on that
# line, not on the instruction. Generators keep the instructions they were created with (the
# model's default copies these), and every generated question records the instruction it was
# prompted with (``metadata["instruction"]``).
DEFAULT_INSTRUCTIONS = {
    REPHRASE: "Rephrase the question and answer it.",
    SIMILAR: "Given a context, generate a similar question to the given question and answer it.",
    COUNTERFACTUAL: "Given the context and question, generate a question that negates the question.",
}


@dataclass
class QuestionDemo:
    """A demonstration of a generalization question: the original, its context, the generated
    question and its answer as ``True``/``False``."""

    question: str
    output: str
    answer: str = ""
    context: str = ""

    @classmethod
    def from_json(cls, data: dict) -> QuestionDemo:
        return cls(question=str(data.get("question", "")), output=str(data.get("output", "")),
                   answer=str(data.get("answer", "")), context=str(data.get("context", "")))

    def as_json(self) -> dict:
        return {"question": self.question, "output": self.output, "answer": self.answer, "context": self.context}


def question_demonstrations_problem(value) -> str | None:
    """Why ``value`` cannot be a question generator's own demonstrations (``QuestionGenerator.demonstrations``,
    read as :class:`QuestionDemo`); None when it can: an object whose question types
    (``QUESTION_TYPES``; other keys are not read, and kept) each hold a list of objects with a
    non-empty ``question`` and ``output`` text, and an ``answer`` and ``context`` that are text (an
    answer may be ``true``/``false``: it is written as ``True``/``False``) when given. Asked by the
    admin's form (``QuestionGenerator.clean``) and where a job takes them, so a job is refused naming
    the field rather than failing at its first batch."""
    if not isinstance(value, dict):
        return (f"must be an object of question types ({', '.join(QUESTION_TYPES)}), each a list of "
                f"demonstrations, not {type(value).__name__}")
    for qtype, demos in value.items():
        if qtype not in QUESTION_TYPES:
            continue
        if not isinstance(demos, list):
            return f"the {qtype} demonstrations must be a list, not {type(demos).__name__}"
        for number, demo in enumerate(demos, start=1):
            problem = _demonstration_object_problem(demo, f"{qtype} demonstration {number}",
                                                    shape="question, context, output, answer", texts=("question", "output"))
            if problem:
                return problem
            for name, kinds in (("answer", (str, bool)), ("context", (str,))):
                if name in demo and not isinstance(demo[name], kinds):
                    return f'{qtype} demonstration {number}: "{name}" must be a text'
    return None


def bool_word(label: str) -> str:
    return "True" if label == "yes" else "False"


def _question_block(qtype: str, question: str, context: str, output: str | None, answer: str | None) -> str:
    question, context = _one_line(question), _one_line(context)
    if qtype == REPHRASE:
        lines = [f"question: {question}", f"rephrase:{'' if output is None else ' ' + _one_line(output)}"]
    elif qtype == SIMILAR:
        lines = [f"context: {context}", f"question: {question}",
                 f"similar:{'' if output is None else ' ' + _one_line(output)}"]
    elif qtype == COUNTERFACTUAL:
        lines = [f"context: {context}", f"question: {question}",
                 f"generate:{'' if output is None else ' ' + _one_line(output)}"]
    else:
        raise ValueError(f"unknown generalization question type {qtype!r}")
    if output is not None:
        lines.append(f"answer: {answer}")
    return "\n".join(lines)


def generalization_prompt(qtype: str, *, instruction: str, demonstrations: list[QuestionDemo],
                          question: str, context: str = "") -> str:
    """Instruction, the demonstrations, then the query which ends at ``rephrase:`` /
    ``similar:`` / ``generate:``. The model writes the question, then a line ``answer: True|False``
    (every type: the paper had the LM answer its questions, then validated them)."""
    blocks = [instruction.strip()]
    for demo in demonstrations:
        blocks.append(_question_block(qtype, demo.question, demo.context, demo.output, demo.answer))
    blocks.append(_question_block(qtype, question, context, None, None))
    return "\n\n".join(blocks)
