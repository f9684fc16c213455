"""What a Quark job trains and how it reads it: the policy (a rationale source or a checkpoint
folder), its prompts with and without a reward token, the parsing of its outputs, and evaluation
(mean reward and task accuracy of greedy outputs on a set of items).

Prompts are the ones the rationale generation job writes for the same source (FEB templates; the
causal backend's demonstrations), so the source a run registers generates exactly what was trained.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from studies.lm import quark, templates
from studies.lm.backends import Decoding
from studies.lm.parsing import ParseFailure, parse_causal_rationale, parse_t5_rationale
from studies.lm.rewards import Reward, RewardSample
from studies.models import Dataset, Item, RationaleSource
from studies.services.model_paths import model_location, model_path_stored

from .common import lm_source, prompt_item
from .errors import GenerationError
from .inputs import source_by_name_or_id

TRAINABLE = ("seq2seq", "causal")

# How :func:`evaluate` counts task accuracy, the figure checkpoint selection (``max_accuracy_drop``)
# compares, and the other reading it records beside it (``accuracy_parsed_only``), which leaves an
# unparsed output out as scoring's task accuracy does by default. SPEC does not say which to use.
ACCURACY_RULE = "greedy outputs; an output that did not parse counts as wrong"
ACCURACY_RULE_PARSED_ONLY = "greedy outputs; an output that did not parse is left out"
ACCURACY_NOTE = (f"Task accuracy: {ACCURACY_RULE} (the default: the figure shown first, and the one checkpoint "
                 f"selection's max_accuracy_drop compares). The other reading, {ACCURACY_RULE_PARSED_ONLY} (as "
                 "scoring's task accuracy does by default), is shown beside it. SPEC section 8 does not say how an "
                 "output that did not parse counts (it says only that parse failures are recorded with the raw "
                 "output, never dropped silently).")


@dataclass
class PolicySpec:
    """The model a run starts from. ``template`` is the plain template (no reward token)."""

    name: str
    backend: str
    model: str
    source_id: int | None = None
    template: str = ""
    demonstrations: list[dict] = field(default_factory=list)
    seed: int = 0

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> PolicySpec:
        return cls(**data)


def _folder_backend(path: Path) -> str:
    config = path / "config.json"
    if not config.is_file():
        raise GenerationError(f"policy {str(path)!r} is neither a rationale source nor a model folder with a config.json")
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError) as exc:
        raise GenerationError(f"cannot read {config}: {exc}") from exc
    return "seq2seq" if data.get("is_encoder_decoder") else "causal"


def resolve_policy(policy: RationaleSource | str, *, dataset: Dataset) -> PolicySpec:
    """A source (instance, name or id) with a seq2seq or causal backend, a model folder, or a
    causal model's ``.gguf`` file.
    A source registered by an earlier Quark run trains further from its plain template."""
    source = policy if isinstance(policy, RationaleSource) else None
    if source is None:
        text = str(policy or "").strip()
        if not text:
            raise GenerationError("choose the policy: a rationale source (name or id) or a checkpoint folder")
        source = source_by_name_or_id(text)
    if source is not None:
        lm_source(source, "policy", backends=TRAINABLE)
        template = (source.training or {}).get("base_template", source.template) \
            if (source.training or {}).get("method") == "quark" else source.template
        # the template rule a source is saved by, however the policy is named (the job's source or
        # params["policy_path"]): a template it cannot use would train every step on one prompt
        problem = templates.template_problem(template or "")
        if problem:
            raise GenerationError(f"policy {source.name!r}: {problem}")
        # the demonstrations rule a source is saved by (a source stored before it, refused here by name)
        problem = templates.demonstrations_problem(list(source.demonstrations or []))
        if problem:
            raise GenerationError(f"policy {source.name!r}: its demonstrations {problem}: correct them on the source")
        spec = PolicySpec(name=source.name, backend=source.backend, model=source.model_name_or_path,
                          source_id=source.pk, template=template, demonstrations=list(source.demonstrations or []),
                          seed=source.seed)
    else:
        try:
            path = Path(model_location(str(policy))).expanduser()  # a stored ``models:`` form too
            is_folder = path.is_dir()
            is_gguf = path.suffix.lower() == ".gguf" and path.is_file()
        except (OSError, ValueError, RuntimeError):
            is_folder = is_gguf = False
        if is_gguf:  # a causal GGUF file: trained de-quantized, its checkpoints ordinary folders
            spec = PolicySpec(name=path.stem, backend="causal", model=model_path_stored(path.resolve()))
        elif not is_folder:
            raise GenerationError(f"policy {str(policy)!r} is neither a rationale source, a model folder nor a "
                                  ".gguf file")
        else:
            spec = PolicySpec(name=path.name, backend=_folder_backend(path), model=model_path_stored(path.resolve()))
    # A causal policy without demonstrations of its own reads six of the dataset's train items: drawn
    # when the job's first batch starts, among the items its researcher may read (quark._policy_demonstrations).
    return spec


class PolicyPrompts:
    """Prompts and parsing for one policy over a fixed set of items (loaded once)."""

    def __init__(self, spec: PolicySpec, item_ids: list[int]):
        self.spec = spec
        items = Item.objects.select_related("dataset").in_bulk(item_ids)
        self.items = {pk: prompt_item(item) for pk, item in items.items()}
        self.gold = {pk: item.gold_answer for pk, item in items.items()}
        self.demos = [templates.demonstration_read(d) for d in spec.demonstrations]

    def template(self, token: str | None) -> str:
        if token is None:
            return self.spec.template
        return quark.control_template(self.spec.backend, self.spec.template, token)

    def prompt(self, item_id: int, token: str | None) -> str:
        pitem = self.items[item_id]
        if self.spec.backend == "seq2seq":
            return templates.t5_explain_input(pitem, self.template(token))
        return templates.causal_prompt(pitem, self.demos, self.template(token))

    @property
    def stop(self) -> list[str]:
        return [templates.CAUSAL_STOP] if self.spec.backend == "causal" else []

    def parse(self, item_id: int, raw: str):
        parse = parse_t5_rationale if self.spec.backend == "seq2seq" else parse_causal_rationale
        parsed = parse(raw, self.items[item_id])
        return None if isinstance(parsed, ParseFailure) else parsed

    def samples(self, item_ids: list[int], responses: list[str]) -> list[RewardSample]:
        out = []
        for item_id, raw in zip(item_ids, responses, strict=True):
            parsed = self.parse(item_id, raw)
            out.append(RewardSample(item=item_id, rationale=parsed.rationale if parsed else None,
                                    answer=parsed.answer if parsed else None))
        return out

    def scorer(self, reward: Reward) -> Callable[[list[int], list[str]], list[float | None]]:
        """``score(item_ids, responses)`` as the trainer calls it."""
        return lambda item_ids, responses: reward.score(self.samples(item_ids, responses))


def evaluate(trainer: quark.QuarkTrainer, prompts: PolicyPrompts, reward: Reward, item_ids: list[int], *,
             reference: bool, batch_size: int = 16, tick: Callable[[], None] | None = None,
             samples: int = 0) -> dict:
    """Greedy outputs of the reference (plain prompt, as the original source generates) or of the
    policy (best reward token prepended, as the registered source generates) on ``item_ids``:
    mean reward over the rewarded outputs, task accuracy under :data:`ACCURACY_RULE` (``accuracy``)
    and under :data:`ACCURACY_RULE_PARSED_ONLY` (``accuracy_parsed_only``), how many parsed, and
    three examples.

    ``samples`` > 0 adds ``sampled_reward``: the mean reward of that many rationales sampled per
    item (the run's top-p and temperature, one fixed seed, so the reference before and the policy
    after draw alike), over ``sampled_rewarded`` rewarded samples. A few greedy outputs move in
    steps of 1/len(item_ids); the sampled share shows what training did to the distribution."""
    token = None if reference else quark.reward_token(0)
    s = trainer.settings
    greedy = Decoding(do_sample=False, max_new_tokens=s.max_new_tokens, stop=prompts.stop)
    sampled = Decoding(do_sample=True, top_p=s.top_p, temperature=s.temperature, max_new_tokens=s.max_new_tokens,
                       num_return_sequences=max(samples, 1), stop=prompts.stop,
                       seed=s.seed * 1_000_003 - 1)  # never a training draw's seed (those add the step, >= 0)
    rewards: list[float] = []
    sampled_rewards: list[float] = []
    correct = parsed = 0
    examples = []
    for start in range(0, len(item_ids), batch_size):
        chunk = item_ids[start:start + batch_size]
        outputs = [group[0] for group in trainer.generate(chunk, token, greedy, reference=reference)]
        scored = prompts.samples(chunk, outputs)
        values = reward.score(scored)
        for sample, value in zip(scored, values, strict=True):
            if value is not None:
                rewards.append(float(value))
            if sample.rationale is not None:
                parsed += 1
                correct += sample.answer == prompts.gold[sample.item]
            if len(examples) < 3:
                examples.append({"item": sample.item, "answer": sample.answer, "rationale": sample.rationale,
                                 "reward": value})
        if samples:
            groups = trainer.generate(chunk, token, sampled, reference=reference)
            values = reward.score(prompts.samples([i for i, g in zip(chunk, groups, strict=True) for _ in g],
                                                  [text for g in groups for text in g]))
            sampled_rewards += [float(v) for v in values if v is not None]
        if tick is not None:
            tick()
    n = len(item_ids)
    result = {"reward": sum(rewards) / len(rewards) if rewards else None, "accuracy": correct / n if n else None,
              "accuracy_parsed_only": correct / parsed if parsed else None, "correct": correct,
              "items": n, "rewarded": len(rewards), "parsed": parsed, "examples": examples}
    if samples:
        result.update({"sampled_reward": sum(sampled_rewards) / len(sampled_rewards) if sampled_rewards else None,
                       "samples_per_item": samples, "sampled_rewarded": len(sampled_rewards)})
    return result


def accuracy_parsed_only(result: dict | None) -> float | None:
    """Task accuracy under :data:`ACCURACY_RULE_PARSED_ONLY` of an evaluation: :func:`evaluate`'s
    result has it; a checkpoint's entry in ``evaluations`` (and ``best``) keeps only ``accuracy``,
    ``items`` and ``parsed``, from which it follows (correct = accuracy x items). None when the
    evaluation does not say (an older job's step 0) or nothing parsed."""
    if not result:
        return None
    if "accuracy_parsed_only" in result:
        return result["accuracy_parsed_only"]
    accuracy, items, parsed = result.get("accuracy"), result.get("items"), result.get("parsed")
    if accuracy is None or items is None or not parsed:
        return None
    return round(accuracy * items) / parsed
