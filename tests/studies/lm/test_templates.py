"""FEB templates for yes/no and four-option items; generalization question prompts."""
from studies.lm import templates

YES_NO = (("yes", "Yes"), ("no", "No"))
FOUR = (("a", "the sun"), ("b", "the moon"), ("c", "a rock"), ("d", "water"))


def yes_no_item(**kw):
    return templates.PromptItem(question="Can I build a house on an asteroid?", choices=YES_NO, dataset="StrategyQA",
                                answer="no", rationale="Asteroids have too little gravity.", **kw)


def four_item():
    return templates.PromptItem(question="Which gives off light?", choices=FOUR, dataset="OpenBookQA",
                                answer="a", rationale="The sun is a star.")


def test_t5_explain_renders_yes_no_item():
    assert templates.t5_explain_input(yes_no_item()) == (
        "explain strategyqa question: Can I build a house on an asteroid? choice: yes choice: no "
        "<extra_id_0> because <extra_id_1>")
    assert templates.t5_explain_target(yes_no_item()) == (
        "<extra_id_0> no <extra_id_1> Asteroids have too little gravity. <extra_id_2>")


def test_t5_explain_renders_four_option_item_with_choice_texts():
    assert templates.t5_explain_input(four_item()) == (
        "explain openbookqa question: Which gives off light? choice: the sun choice: the moon choice: a rock "
        "choice: water <extra_id_0> because <extra_id_1>")
    assert templates.t5_explain_target(four_item()) == "<extra_id_0> the sun <extra_id_1> The sun is a star. <extra_id_2>"


def test_answer_templates_for_the_genu_answerers():
    item = yes_no_item()
    assert templates.t5_answer_with_rationale_input(item, "Low gravity.") == (
        "answer strategyqa question given the explanation: Can I build a house on an asteroid? choice: yes "
        "choice: no <extra_id_0> because <extra_id_1> Low gravity. <extra_id_2>")
    assert templates.t5_answer_input(item) == (
        "answer strategyqa question: Can I build a house on an asteroid? choice: yes choice: no <extra_id_0>")
    assert templates.t5_answer_target(item) == "<extra_id_0> no <extra_id_1>"


def test_causal_prompt_has_header_six_blocks_and_stops_after_answer():
    pool = [templates.PromptItem(question=f"Q{i}?", choices=FOUR, answer="b", rationale=f"R{i}.", key=i)
            for i in range(10)]
    demos = templates.draw_demonstrations(pool, seed=3)
    prompt = templates.causal_prompt(four_item(), demos)
    assert prompt.startswith(templates.CAUSAL_HEADER + "\nQuestion: ")
    assert prompt.count("###") == 6
    assert "Choices: the sun, the moon, a rock, water\nAnswer: the moon\nReason: R" in prompt
    assert prompt.endswith("Question: Which gives off light?\nChoices: the sun, the moon, a rock, water\nAnswer:")


def test_demonstrations_are_reproducible_for_a_seed_and_vary_across_seeds():
    pool = [templates.PromptItem(question=f"Q{i}?", choices=YES_NO, answer="yes", rationale="R.", key=i) for i in range(30)]
    first = [d.key for d in templates.draw_demonstrations(pool, seed=7)]
    assert first == [d.key for d in templates.draw_demonstrations(list(reversed(pool)), seed=7)]
    assert first != [d.key for d in templates.draw_demonstrations(pool, seed=8)]
    assert len(first) == 6


def test_demonstrations_need_six_items_with_rationales():
    pool = [templates.PromptItem(question="Q?", choices=YES_NO, answer="yes", rationale="", key=i) for i in range(10)]
    try:
        templates.draw_demonstrations(pool, seed=0)
    except ValueError as exc:
        assert "need 6" in str(exc)
    else:
        raise AssertionError("expected a ValueError")


def test_custom_template_fills_only_known_placeholders():
    item = yes_no_item()
    hostile = templates.PromptItem(question="{question.__class__} {0} {rationale}", choices=YES_NO, dataset="x")
    rendered = templates.fill("Q: {question} | {choices_csv} | {unknown}", templates._fields(hostile))
    assert rendered == "Q: {question.__class__} {0} {rationale} | yes, no | {unknown}"
    assert templates.t5_explain_input(item, "{dataset}: {question}") == "strategyqa: Can I build a house on an asteroid?"


def test_a_source_template_names_only_known_placeholders_and_the_question():
    """``fill`` leaves an unknown placeholder as text, so a typo (``{qestion}``) would reach every
    prompt and a template without ``{question}`` would give every item the same prompt:
    ``template_problem`` names either, with the placeholders allowed."""
    assert templates.template_problem("explain {dataset} question: {qestion} {choices}") == (
        "template: {qestion} is not a placeholder; the placeholders are {dataset}, {question}, {choices}, "
        "{choices_csv}, {demonstrations}, {answer}, {rationale}")
    assert templates.template_problem("{0} {question}").startswith("template: {0} is not a placeholder")
    assert templates.template_problem("{demonstrations}\nAnswer:").startswith("template: it has no {question}")
    for usable in ("", templates.T5_EXPLAIN, templates.CAUSAL_FEW_SHOT, '{question} as {"answer": "yes"} { }'):
        assert templates.template_problem(usable) == "", usable


def test_generalization_prompts_follow_the_authors_shapes():
    demo = templates.QuestionDemo(question="Is the sky blue?", output="Does the sky look blue?", answer="True",
                                  context="Air scatters blue light.")
    rephrase = templates.generalization_prompt("rephrase", instruction=templates.DEFAULT_INSTRUCTIONS["rephrase"],
                                               demonstrations=[demo], question="Is grass green?")
    assert rephrase == ("Rephrase the question and answer it.\n\nquestion: Is the sky blue?\n"
                        "rephrase: Does the sky look blue?\nanswer: True\n\nquestion: Is grass green?\nrephrase:")
    similar = templates.generalization_prompt("similar", instruction="I", demonstrations=[demo],
                                              question="Is grass green?", context="Chlorophyll.")
    assert similar.endswith("context: Chlorophyll.\nquestion: Is grass green?\nsimilar:")
    counter = templates.generalization_prompt("counterfactual", instruction="I", demonstrations=[demo],
                                              question="Is grass green?", context="Chlorophyll.")
    assert "generate: Does the sky look blue?\nanswer: " in counter  # the LM answers counterfactuals too
    assert counter.endswith("question: Is grass green?\ngenerate:")
