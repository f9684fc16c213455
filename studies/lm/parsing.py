"""Split raw model outputs into (answer label, rationale).

Every parser returns either a parsed value or a :class:`ParseFailure` holding the raw text and a
reason a researcher can read; nothing is dropped silently (SPEC section 8).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .templates import CAUSAL_STOP, T5_SENTINEL_TEXT, PromptItem

_SENTINEL = re.compile(r"<extra_id_(\d+)>")
_NOISE = ("<pad>", "</s>", "<s>", "<|endoftext|>")
_YES = {"yes", "true", "y"}
_NO = {"no", "false", "n"}


@dataclass(frozen=True)
class ParseFailure:
    raw: str
    reason: str

    def __bool__(self) -> bool:  # a failure is falsy, so ``if parsed:`` reads naturally
        return False


@dataclass(frozen=True)
class ParsedRationale:
    answer: str  # choice label
    rationale: str
    answer_text: str


@dataclass(frozen=True)
class ParsedAnswer:
    answer: str
    answer_text: str


@dataclass(frozen=True)
class ParsedQuestion:
    text: str
    answer: str  # "yes" / "no"


def _clean(text: str) -> str:
    for token in _NOISE:
        text = text.replace(token, " ")
    return text


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


_ARTICLES = ("a", "an", "the")


def _bare(norm: str) -> str:
    """A normalised answer without its leading articles ("the heater" -> "heater"), unless nothing
    else is left ("a" stays "a": it may be a label)."""
    words = norm.split()
    while len(words) > 1 and words[0] in _ARTICLES:
        words = words[1:]
    return " ".join(words)


def _yes_no_word(text: str) -> str | None:
    """``"yes"`` / ``"no"`` for a reply that says so, or None. The whole reply may be a word of
    :data:`_YES` / :data:`_NO` (``"Y"``, ``"True."``); otherwise its first token, with the
    punctuation around it dropped, must be a whole word of them, not a one-letter shortcut:
    "No, because ..." is no, but "N/A" and "Y'know, it depends" are neither."""
    norm = _norm(text)
    if norm in _YES:
        return "yes"
    if norm in _NO:
        return "no"
    tokens = text.split()
    first = re.sub(r"^\W+|\W+$", "", tokens[0]).lower() if tokens else ""
    if len(first) > 1 and first in _YES:
        return "yes"
    if len(first) > 1 and first in _NO:
        return "no"
    return None


def _only(labels: list[str]) -> str | None:
    return labels[0] if len(set(labels)) == 1 else None


# Markdown emphasis around words ("**B**", "*yes*", "`b`"), not inside one ("snake_case", "2*3").
_EMPHASIS = re.compile(r"(?<!\w)[*_`]+|[*_`]+(?!\w)")
# One answer preamble opening the reply, as chat models write it ("The correct answer is (B).",
# "Answer: yes"); "is" must be the whole word, so "The answer isn't clear" keeps its preamble.
_PREAMBLE = re.compile(
    r"(?:the\s+)?(?:correct\s+|final\s+)?answer(?:\s+is(?![\w'’])\s*:?|['’]s(?!\w)\s*:?|\s*:|\s+[-–—](?=\s))\s*(.*)",
    re.IGNORECASE | re.DOTALL)


def _answer_part(text: str) -> tuple[str, bool]:
    """The reply the choice rules read: without markdown emphasis, without one leading answer
    preamble and without a final full stop ("**The answer is (B).**" -> "(B)"), and whether a
    preamble was set aside. A preamble with nothing after it leaves nothing, a parse failure; one in
    the middle of a reply stays, so "I think the answer is B" is read as written."""
    text = _EMPHASIS.sub("", text).strip()
    preamble = _PREAMBLE.fullmatch(text)
    if preamble:
        text = preamble.group(1).strip()
    return re.sub(r"\s*[.!]+$", "", text), preamble is not None


# After a preamble, a yes/no word is the answer when the reply ends there, or goes on with
# punctuation or its reasons ("The answer is no: one cannot know", "The answer is yes because ...");
# followed by anything else ("The answer is no doubt yes", "The answer is no one knows") it says
# neither, and so does a reply that then names the other word ("The answer is yes, but actually no").
_YES_NO_STANDS = re.compile(
    r"\W*(?:yes|no|true|false|y|n)\W*?(?:$|[,;:.!?()]|\s+(?:because|as|since|given|for|so|due)\b)", re.IGNORECASE)
_YES_NO_OTHER = r"(?:[,;:(/]|\b(?:and|or|but|actually)\b)\W*(?:(?:and|or|but|actually)\s+)*(?:{words})\b"


def _yes_no_stands(text: str) -> bool:
    """Whether, after a preamble, the yes/no word opening ``text`` is the answer (see above)."""
    return bool(_YES_NO_STANDS.match(text)) and not _names_other_word(text, _yes_no_word(text))


def _names_other_word(text: str, word: str | None) -> bool:
    """Whether a reply opening with the yes/no ``word`` then names the other one ("Yes, but actually
    no", "No; yes in winter", "Yes and no"), with or without a preamble: it says neither."""
    if word is None:
        return False
    other = "|".join(_NO if word == "yes" else _YES)
    return re.search(_YES_NO_OTHER.format(words=other), text, flags=re.IGNORECASE) is not None


def _lists_other_label(rest: str, label: str, others: list[str]) -> bool:
    """Whether the text after ``label`` names another label as a choice too: the rest is only labels
    joined by commas, "or", "and", "and/or", "/" or "&" ("B or C", "B, C, or D", "(B) and (D)", "B.
    Both B and C", "B (or C)"), or it ends in another label standing alone after a stop or comma, or
    after words that take the first back ("C. Wait, no, B", "B. Actually C", "B. The answer is C",
    "B, or maybe C": ``_CORRECTION``). A label inside a sentence of reasons is not one ("B. C and D are wrong", "B, not C
    or D"), nor is an article ("B, a magnet is ...") or a number ("2. The total is 1.4")."""
    if not others:
        return False
    other = r"\(?(?:" + "|".join(re.escape(o) for o in others) + r")\)?"
    some = r"\(?(?:" + "|".join(re.escape(o) for o in [label, *others]) + r")\)?"
    sep = r"\s*(?:,\s*(?:or|and)\b|and/or|or|and|[,/&])\s*"
    rest = re.sub(r"[\s.!?]+$", "", rest)
    if re.fullmatch(rf"\(\s*(?:or|and)\s+{other}\s*\)", rest):  # "B (or C)"
        return True
    listed = re.fullmatch(rf"(?:{sep})?(?:(?:both|either)\s+)?{some}(?:{sep}{some})*", rest)
    if listed is not None and re.search(rf"(?<!\w){other}(?!\w)", rest):
        return True
    return re.search(rf"(?:^|(?<!\d)[,.:;]\s+){_CORRECTION}{other}$", rest) is not None


# What may stand between a label and another one closing the reply, which then takes it back ("C.
# Wait, no, B", "B. Actually C", "B. The answer is C", "B, or maybe C", "B, I mean C"), each a
# whole word; or nothing, after a stop or a comma ("C. B").
_CORRECTION = (r"(?:(?:no|wait|actually|or|maybe|rather|sorry|i\s+mean|(?:the\s+)?(?:correct\s+|final\s+|right\s+)?"
               r"answer(?:\s+is|['’]s)?|it['’]?s|it\s+is|make\s+that)(?!\w)\W*)*")


def _word_spans(phrase: str, text: str) -> list[tuple[int, int]]:
    """Where ``phrase`` stands in ``text`` as whole words."""
    return [m.span() for m in re.finditer(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)", text)]


def _names_other_text(rest: str, others: list[str], *, own: str) -> bool:
    """Whether the text after a label names another option's text, outside the label's own option
    text ("(b), because sea turtles will hatch more", where b is that and a is "turtles will hatch
    more", names only b)."""
    inside = _word_spans(own, rest) if own else []
    return any(not any(s <= start and end <= e for s, e in inside)
               for other in others for start, end in _word_spans(other, rest))


def match_answer(text: str, item: PromptItem) -> str | None:
    """Map an answer as the model wrote it to a choice label, or None.

    Multiple choice, in order: the text of exactly one option (case and punctuation aside); a label
    alone or followed by that option's own text ("(b)", "b", "b) the moon", "option b"), or a label
    followed by text naming no other option ("b) because magnets attract", "B because ..."); the
    text of exactly one option without leading articles ("a magnet" is the option "magnet", not
    label a: a bare "a" is the article when an option's text follows it at once, and "A because it
    is heavy" is label a); the text of one option inside
    a longer answer, on word boundaries, the longest winning over options it contains ("the
    sunlight" is "sunlight", not "sun"). A label followed by another option's text, or an answer
    naming several options ("B or C"), is None: a parse failure, never a guess. Every rule reads the
    reply without markdown emphasis, one leading answer preamble ("Answer:", "The correct answer is")
    or a final full stop, so "**The answer is (B).**" is b and "The answer is not clear" is None;
    after a preamble, a yes/no word not followed by the end, punctuation or its reasons ("The answer
    is no one knows"), is None; so is a yes/no word followed by the other ("yes, but actually no",
    with or without a preamble). A
    reply that is exactly an option's text, or opens with a longer option's whole text ("B and D
    because ..." where "B and D" is option a), is read by the option texts, not as a label."""
    raw_norm = _norm(text)
    text, preamble = _answer_part(text)
    norm = _norm(text)
    if not norm:
        return None
    if item.is_yes_no:
        if preamble and not _yes_no_stands(text):
            return None
        word = _yes_no_word(text)
        return None if _names_other_word(text, word) else word
    options = [(label, _norm(choice)) for label, choice in item.choices]
    options = [(label, choice) for label, choice in options if choice]
    exact = [label for label, choice in options if choice in (norm, raw_norm)]
    if exact:
        return _only(exact)
    own = dict(options)
    # An option of several words that opens the reply: the option texts decide (below).
    opens_with_option = any(" " in choice and norm.startswith(choice + " ") for _label, choice in options)
    for label, _ in () if opens_with_option else item.choices:
        found = re.fullmatch(r"(?:(option|choice)\s+)?(\()?" + re.escape(label.lower()) + r"(\)[.:,]?|[.:,])?(?:\s+(.*))?",
                             text.strip().lower(), flags=re.DOTALL)
        if not found:
            continue
        rest = _norm(found.group(4) or "")
        if not rest or (label in own and _bare(rest) == _bare(own[label])):
            return label
        # A label followed by its reasons ("b)", "(b)", "option b", "B because ...") is that label;
        # one followed by another option's text ("(a) magnet" where a is stone) is a failure. A bare
        # "a" may be the article: it is read as the label only when no option's text is read below.
        others = [_bare(choice) for other, choice in options if other != label]
        names_other = _names_other_text(rest, others, own=_bare(own[label]) if label in own else "")
        marked = found.group(1) or found.group(2) or found.group(3)
        # "a magnet": the article, when an option's text follows it at once; "A because it is not
        # a magnet" is label a with its reasons.
        article = not marked and label.lower() in _ARTICLES and any(
            re.match(re.escape(other) + r"(?!\w)", _bare(rest)) for other in others)
        if not article:
            lists_other = _lists_other_label((found.group(4) or "").strip(), label.lower(),
                                             [other.lower() for other, _ in item.choices if other != label])
            return None if names_other or lists_other else label
    exact = [label for label, choice in options if _bare(norm) == _bare(choice)]
    if exact:
        return _only(exact)
    spans = {label: _word_spans(_bare(choice), norm) for label, choice in options}
    spans = {label: found for label, found in spans.items() if found}

    def inside_longer(label: str) -> bool:
        return all(any(s <= start and end <= e and (e - s) > (end - start)
                       for other, found in spans.items() if other != label for s, e in found)
                   for start, end in spans[label])

    return _only([label for label in spans if not inside_longer(label)])


def _spans(text: str) -> dict[int, str]:
    """Text following each sentinel, up to the next sentinel."""
    parts = _SENTINEL.split(text)
    # parts = [before, id, after, id, after, ...]
    spans: dict[int, str] = {}
    for index in range(1, len(parts), 2):
        sentinel = int(parts[index])
        if sentinel not in spans:
            spans[sentinel] = " ".join(parts[index + 1].split())
    return spans


def _parsed_rationale(raw: str, item: PromptItem, *, answer_part: str, rationale: str) -> ParsedRationale | ParseFailure:
    """The checks every rationale parser ends with: a non-empty answer that names one of the
    item's choices, then a non-empty rationale."""
    if not answer_part:
        return ParseFailure(raw, "empty answer")
    label = match_answer(answer_part, item)
    if label is None:
        return ParseFailure(raw, f"answer {answer_part[:80]!r} is not one of the choices")
    if not rationale:
        return ParseFailure(raw, "empty rationale")
    return ParsedRationale(answer=label, rationale=rationale, answer_text=answer_part)


def parse_t5_rationale(raw: str, item: PromptItem) -> ParsedRationale | ParseFailure:
    """``<extra_id_0> {answer} <extra_id_1> {rationale} <extra_id_2>``; decoded with special tokens kept."""
    text = _clean(raw)
    spans = _spans(text)
    if 1 not in spans:
        return ParseFailure(raw, "no <extra_id_1> separating the answer from the rationale")
    if 0 in spans:
        answer_part = spans[0]
    else:  # the answer before <extra_id_1> without its opening sentinel
        answer_part = " ".join(_SENTINEL.split(text)[0].split())
    rationale = spans[1]
    return _parsed_rationale(raw, item, answer_part=answer_part, rationale=rationale)


def parse_t5_answer(raw: str, item: PromptItem) -> ParsedAnswer | ParseFailure:
    """``<extra_id_0> {answer} <extra_id_1>`` (F^I and F^IR answerers)."""
    text = _clean(raw)
    spans = _spans(text)
    answer_part = spans.get(0, " ".join(_SENTINEL.split(text)[0].split()))
    if not answer_part:
        return ParseFailure(raw, "empty answer")
    label = match_answer(answer_part, item)
    if label is None:
        return ParseFailure(raw, f"answer {answer_part[:80]!r} is not one of the choices")
    return ParsedAnswer(answer=label, answer_text=answer_part)


def parse_causal_rationale(raw: str, item: PromptItem) -> ParsedRationale | ParseFailure:
    """The continuation of a prompt ending in ``Answer:``: `` {answer}\\nReason: {rationale}\\n###``."""
    text = _clean(raw).split(CAUSAL_STOP, 1)[0]
    match = re.search(r"\bReason\s*:", text)
    if not match:
        return ParseFailure(raw, "no 'Reason:' after the answer")
    answer_part = " ".join(text[: match.start()].split())
    rationale = " ".join(text[match.end():].split("\nQuestion:", 1)[0].split())
    return _parsed_rationale(raw, item, answer_part=answer_part, rationale=rationale)


def parse_causal_answer(raw: str, item: PromptItem) -> ParsedAnswer | ParseFailure:
    """The continuation of a prompt ending in ``Answer:`` (causal and OpenAI-compatible Gen-U
    answerers): the answer on its first line."""
    text = _clean(raw).split(CAUSAL_STOP, 1)[0].strip()
    first = text.splitlines()[0].strip() if text else ""
    if not first:
        return ParseFailure(raw, "empty answer")
    label = match_answer(first, item)
    if label is None:
        return ParseFailure(raw, f"answer {first[:80]!r} is not one of the choices")
    return ParsedAnswer(answer=label, answer_text=first)


_ANSWER_OPENING = re.compile(r"^(?:yes|no|true|false)\b\s*[,.!:;]", re.IGNORECASE)


_CLOSING = "\"'”’)]"
_OPENING = "\"'“‘(["
# A yes/no question opens with an auxiliary verb; one that lost its question mark is still one
# question when it is one sentence ("Do ABBA's 1970's genre still matter").
_YES_NO_OPENING = re.compile(
    r"^(?:is|are|was|were|do|does|did|can|could|would|will|should|shall|has|have|had|may|might|must)\b",
    re.IGNORECASE)


def question_problem(text: str) -> str | None:
    """Why ``text`` is not a usable question, or None. A question ends with its only question
    mark and does not open like an answer ("No, it would not. ..."). A yes/no question (opening
    "Is ...", "Does ...", possibly inside quotes) may have closing quotes or brackets after its mark
    (``Could Alice be the main character of "Alice's Adventures in Wonderland?"``), and one that is
    a single sentence lacking the mark is a question too ("Do ABBA's 1970's genre still matter")."""
    if not _is_question(text):
        return "not a question (it does not end with '?')"
    if text.count("?") > 1:
        return "more than one question"
    if _ANSWER_OPENING.match(text):
        return "reads as an answer, not a question"
    return None


def _is_question(text: str) -> bool:
    if text.endswith("?"):
        return True
    yes_no = _YES_NO_OPENING.match(text.lstrip(_OPENING))
    if yes_no and text.rstrip(_CLOSING).endswith("?"):
        return True
    body = text.rstrip(".").rstrip()
    return bool(yes_no) and "?" not in text and not re.search(r"[.!;:]\s", body) and body[-1:].isalnum()


def parse_generalization(raw: str) -> ParsedQuestion | ParseFailure:
    """A generated question: its first line, then ``answer: True|False`` (every type: the LM
    answers its own question, counterfactuals included; the answer stays unvalidated until a
    validation study or a researcher confirms it). Stops at the next block. Outputs that are not
    a question are refused (:func:`question_problem`). Every T5 sentinel token is taken out first:
    a seq2seq generator's output is framed by them (``<extra_id_0> ... <extra_id_1>``), and one
    written otherwise (``< extra_id_0 >``, ``<EXTRA_ID_0>``) is a sentinel to the rule every stored
    question follows too (``templates.T5_SENTINEL_TEXT``, ``studies.textrules.sentinel_problem``)."""
    text = _clean(raw)
    text = T5_SENTINEL_TEXT.sub(" ", text).strip()
    block = re.split(r"\n\s*\n|\n(?:question|context)\s*:", text, maxsplit=1)[0]
    lines = [line.strip() for line in block.splitlines() if line.strip()]
    if not lines:
        return ParseFailure(raw, "empty question")
    question = lines[0]
    inline = re.search(r"\banswer\s*:\s*(\S.*)", question, flags=re.IGNORECASE)
    answer_word = None
    if inline:
        answer_word = inline.group(1).strip()
        question = question[: inline.start()].strip()
    for line in lines[1:]:
        found = re.match(r"answer\s*:\s*(\S.*)", line, flags=re.IGNORECASE)
        if found:
            answer_word = found.group(1).strip()
            break
    question = " ".join(question.split())
    if not question:
        return ParseFailure(raw, "empty question")
    problem = question_problem(question)
    if problem:
        return ParseFailure(raw, problem)
    if answer_word is None:
        return ParseFailure(raw, "no 'answer: True|False' line after the question")
    answer = _yes_no_word(answer_word)
    if answer is None:
        return ParseFailure(raw, f"answer {answer_word[:80]!r} is neither True nor False")
    return ParsedQuestion(text=question, answer=answer)
