"""An LM reply is read as the choice it names, or as a parse failure: never as another label
(an article read as option a, a substring of a longer choice, "N/A" read as no)."""
import pytest

from studies.lm import parsing, templates

OBQA = templates.PromptItem(question="What attracts iron filings?",
                            choices=(("a", "stone"), ("b", "magnet"), ("c", "glass"), ("d", "paper")))
YN = templates.PromptItem(question="Is the sky green?", choices=(("yes", "Yes"), ("no", "No")))
SUN = templates.PromptItem(question="What warms a leaf?", choices=(("a", "sun"), ("b", "sunlight"), ("c", "moon")))
HEAT = templates.PromptItem(question="What warms the room?", choices=(("a", "heat"), ("b", "the heater")))
PAN = templates.PromptItem(question="Which conducts heat?", choices=(("a", "iron"), ("b", "iron pan"), ("c", "wood")))


def test_an_article_before_the_choice_text_is_not_label_a():
    parsed = parsing.parse_causal_rationale(" a magnet\nReason: A magnet attracts iron.\n###", OBQA)
    assert (parsed.answer, parsed.rationale) == ("b", "A magnet attracts iron.")
    assert parsing.parse_causal_answer(" a magnet", OBQA).answer == "b"
    assert parsing.parse_t5_answer("<extra_id_0> a magnet <extra_id_1>", OBQA).answer == "b"
    assert parsing.parse_t5_rationale("<extra_id_0> a magnet <extra_id_1> It attracts iron. <extra_id_2>", OBQA).answer == "b"


@pytest.mark.parametrize("answer, label", [
    ("a", "a"), ("A", "a"), ("(b)", "b"), ("b) magnet", "b"), ("b. a magnet", "b"), ("option c", "c"),
    ("a stone", "a"), ("stone", "a"), ("Paper.", "d"),
    # a label followed by its reasons, naming no other option
    ("b) because magnets attract iron", "b"), ("(c) it is clear", "c"), ("option d, since it burns", "d"),
    # a plain letter followed by its reasons ("a" too, when no option's text follows the article)
    ("b because magnets attract iron", "b"), ("B - because", "b"), ("A because stones are heavy", "a"),
    # "a" is the article only when an option's text follows it at once
    ("A because a glass would not stick", None), ("A is correct, not the glass", None), ("A since paper burns", None),
    ("A because it is heavy", "a"), ("a stone, because it is heavy", "a"),
])
def test_labels_alone_or_with_their_own_text_still_parse(answer, label):
    assert parsing.match_answer(answer, OBQA) == label


@pytest.mark.parametrize("answer", ["(a) magnet", "a) magnet", "magnet and stone", "option b: glass"])
def test_a_label_with_another_options_text_or_two_options_is_a_failure(answer):
    assert parsing.match_answer(answer, OBQA) is None
    assert isinstance(parsing.parse_causal_answer(answer, OBQA), parsing.ParseFailure)


def test_choice_text_matches_on_word_boundaries_and_the_longest_choice_wins():
    assert parsing.parse_causal_answer(" the sunlight", SUN).answer == "b"
    assert parsing.parse_causal_answer(" sun", SUN).answer == "a"
    assert parsing.parse_causal_answer(" heater", HEAT).answer == "b"
    assert parsing.parse_causal_answer(" heat", HEAT).answer == "a"
    assert parsing.parse_causal_answer(" an iron pan, surely", PAN).answer == "b"
    assert isinstance(parsing.parse_causal_answer(" the sun, not the moon", SUN), parsing.ParseFailure)


@pytest.mark.parametrize("raw", ["N/A", "n/a - cannot tell", "Y'know, it depends", "Nope", "Unknown", "no-brainer"])
def test_yes_no_replies_that_say_neither_are_failures(raw):
    parsed = parsing.parse_causal_answer(raw, YN)
    assert isinstance(parsed, parsing.ParseFailure) and "not one of the choices" in parsed.reason
    assert isinstance(parsing.parse_t5_answer(f"<extra_id_0> {raw} <extra_id_1>", YN), parsing.ParseFailure)


@pytest.mark.parametrize("raw, label", [
    ("Y", "yes"), ("n", "no"), ("Yes.", "yes"), ("No, because it is not.", "no"), ("True", "yes"), ("(false)", "no"),
])
def test_yes_no_words_and_a_lone_letter_still_parse(raw, label):
    assert parsing.parse_causal_answer(raw, YN).answer == label


def test_a_generated_question_answered_n_a_is_a_failure():
    parsed = parsing.parse_generalization("Is the sea salty?\nanswer: N/A")
    assert isinstance(parsed, parsing.ParseFailure) and "neither True nor False" in parsed.reason
    assert isinstance(parsing.parse_generalization("Is the sea salty? answer: n/a"), parsing.ParseFailure)
    assert parsing.parse_generalization("Is the sea salty?\nanswer: True.").answer == "yes"
    assert parsing.parse_generalization("Is the sea salty? answer: False, it is not").answer == "no"
