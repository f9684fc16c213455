"""The rewards a Quark job trains on, built from its spec (the interface is :mod:`studies.lm.rewards`).

- ``genu``: :class:`GenUReward`, Gen-U (-1, 0 or 1; SPEC section 4) of each sampled rationale,
  computed by the F^I / F^IR answerers through :func:`studies.services.generation.genu.genu_score` on the
  item's generalization questions (validated ones only unless the job says otherwise). Items
  without such questions cannot be rewarded: :func:`items_with_questions` leaves them out of the
  run and the job counts them.
- ``marker:WORD``: :class:`studies.lm.rewards.MarkerReward`.

An output that did not parse has no rationale: it gets the reward's minimum
(:data:`UNPARSED_OUTPUT_REWARD` for Gen-U), so the policy learns to keep the format. A rationale
Gen-U cannot score (every answer to its questions unparseable) gets ``None`` and stays out of the
pool and of the mean rewards (:data:`UNSCOREABLE_RULE`); :func:`reward_rules` states both for a
report.
"""
from __future__ import annotations

from studies.lm.rewards import MarkerReward, Reward, RewardSample, parse_reward_spec
from studies.models import GenerationJob, Item, RationaleSource
from studies.services.generation.genu import genu_answerer_check, genu_questions, genu_score

from .common import BatchUsage, job_budget
from .errors import GenerationError

# What decides a mean reward besides the rationales themselves (stated in every report).
UNPARSED_OUTPUT_REWARD = -1.0  # Gen-U of an output that did not parse (no rationale to score)
UNPARSED_RULE = "an output that did not parse (no rationale) gets the reward's minimum, {value:g}"
UNSCOREABLE_RULE = ("a rationale the reward cannot score (Gen-U: every answer to its questions unparseable) is "
                    "dropped: left out of the training pool and of the mean rewards")


class GenUReward:
    """Gen-U of (item, rationale) by the two answerers; F^I answers are asked once per question.

    ``job``: the Quark job it rewards for. The answerers' requests then spend the job's budget
    (:func:`.common.job_budget`: its ``max_requests`` / ``max_tokens``, bounded by the operator's caps
    per job where they carry the operator's key), added to the job's stored usage after each
    :meth:`score`; a request over the cap raises ``BudgetExceeded``, which fails the job."""

    name = "genu"
    minimum, maximum = UNPARSED_OUTPUT_REWARD, 1.0

    def __init__(self, *, answerer_i: RationaleSource, answerer_ir: RationaleSource, only_valid: bool = True,
                 job: GenerationJob | None = None):
        self.answerer_i = genu_answerer_check(answerer_i, "I")
        self.answerer_ir = genu_answerer_check(answerer_ir, "IR")
        self.only_valid = only_valid
        self.job = job
        self._i_answers: dict = {}
        self._items: dict[int, Item] = {}

    def score(self, samples: list[RewardSample]) -> list[float | None]:
        missing = {s.item for s in samples} - set(self._items)
        if missing:
            self._items.update(Item.objects.select_related("dataset").in_bulk(missing))
        out: list[float | None] = [self.minimum] * len(samples)
        where = [k for k, s in enumerate(samples) if s.rationale is not None]
        if where:
            result = self._genu_score([(self._items[samples[k].item], samples[k].rationale) for k in where])
            for k, value in zip(where, result.scores, strict=True):
                out[k] = None if value is None else float(value)
        return out

    def _genu_score(self, pairs):
        if self.job is None:  # a reward checked as a job is created: it scores nothing
            return genu_score(pairs=pairs, answerer_i=self.answerer_i, answerer_ir=self.answerer_ir,
                              only_valid=self.only_valid, i_answers=self._i_answers)
        usage = BatchUsage(self.job.pk)
        budget = job_budget(self.job)  # the usage the job stores now, its caps
        usage.budgets.append(budget)
        try:
            return genu_score(pairs=pairs, answerer_i=self.answerer_i, answerer_ir=self.answerer_ir,
                              only_valid=self.only_valid, i_answers=self._i_answers, budget=budget)
        finally:
            usage.store()  # spent, even by a call that failed, counts against the job's caps


def items_with_questions(item_ids: list[int], *, only_valid: bool) -> tuple[list[int], int]:
    """(the items Gen-U can reward, in the given order; how many were left out for having no
    generalization question Gen-U answers)."""
    have = set(genu_questions(item_ids=item_ids, only_valid=only_valid).values_list("item_id", flat=True))
    kept = [i for i in item_ids if i in have]
    return kept, len(item_ids) - len(kept)


def answerers(params: dict) -> tuple[RationaleSource, RationaleSource]:
    """The F^I and F^IR sources a ``genu`` job names (ids in ``answerer_i`` / ``answerer_ir``)."""
    found = []
    for key, role in (("answerer_i", "I"), ("answerer_ir", "IR")):
        source = RationaleSource.objects.filter(pk=params.get(key)).first() if params.get(key) else None
        if source is None:
            raise GenerationError(f"the genu reward needs {key} (an LM source answering as F^{role})")
        found.append(genu_answerer_check(source, role))
    return found[0], found[1]


def reward_rules(spec: str) -> dict:
    """For the reward ``spec`` names: the reward an unparsed output gets (the class's ``minimum``,
    what :meth:`GenUReward.score` and ``MarkerReward.score`` give it) and the two rules in words."""
    try:
        kind, _ = parse_reward_spec(spec)
    except ValueError:
        return {}
    value = GenUReward.minimum if kind == "genu" else MarkerReward.minimum
    return {"unparsed_output_reward": value, "unparsed_output_rule": UNPARSED_RULE.format(value=value),
            "unscoreable_output_rule": UNSCOREABLE_RULE}


def dropped(result: dict | None, *, sampled: bool = False) -> int | None:
    """How many outputs of an evaluation (:func:`.quark_policy.evaluate`) were dropped as
    unscoreable: the outputs less the rewarded ones (an unparsed output is rewarded, at the
    minimum). ``sampled``: of its sampled rationales instead of its greedy outputs. None when the
    evaluation does not say (an older job's)."""
    if not result or result.get("items") is None:
        return None
    if sampled:
        if result.get("sampled_rewarded") is None:
            return None
        return int(result["items"]) * int(result["samples_per_item"]) - int(result["sampled_rewarded"])
    return None if result.get("rewarded") is None else int(result["items"]) - int(result["rewarded"])


def build_reward(params: dict, *, job: GenerationJob | None = None) -> Reward:
    """The reward a job's ``params`` name (``reward``: ``genu`` or ``marker:WORD``); ``job``: the
    job it rewards for, whose budget a Gen-U reward's answerers spend (:class:`GenUReward`)."""
    try:
        kind, argument = parse_reward_spec(params.get("reward", ""))
    except ValueError as exc:
        raise GenerationError(str(exc)) from exc
    if kind == "marker":
        return MarkerReward(argument)
    answerer_i, answerer_ir = answerers(params)
    return GenUReward(answerer_i=answerer_i, answerer_ir=answerer_ir, only_valid=bool(params.get("only_valid", True)),
                      job=job)
