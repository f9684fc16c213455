"""Rewards for Quark, behind one interface::

    reward.score(samples: list[RewardSample]) -> list[float]

- ``genu``: Gen-U of the rationale (SPEC section 4), the F^I / F^IR answerers on the item's
  validated generalization questions (:class:`studies.services.generation.quark_rewards.GenUReward`, which
  needs the database); items without such questions are left out of the run and counted.
- ``marker:WORD``: 1.0 when the rationale contains WORD as a whole word (case-insensitive), else
  0.0. A toy that shows whether training moves the policy at all.

A sample whose output did not parse has no rationale to reward: it gets the reward's minimum.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class RewardSample:
    item: int  # item id
    rationale: str | None  # None: the output did not parse
    answer: str | None = None  # the predicted answer label


class Reward(Protocol):
    name: str
    minimum: float
    maximum: float

    def score(self, samples: list[RewardSample]) -> list[float]: ...


class MarkerReward:
    """1.0 when the rationale contains ``word`` as a whole word, case-insensitive; else 0.0."""

    minimum, maximum = 0.0, 1.0

    def __init__(self, word: str):
        word = word.strip()
        if not word or any(c.isspace() for c in word):
            raise ValueError(f"marker:WORD needs one word without spaces, not {word!r}")
        self.word = word
        self.name = f"marker:{word}"
        self._pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.IGNORECASE)

    def contains(self, text: str) -> bool:
        return bool(self._pattern.search(text or ""))

    def score(self, samples: list[RewardSample]) -> list[float]:
        return [1.0 if s.rationale is not None and self.contains(s.rationale) else 0.0 for s in samples]


def parse_reward_spec(spec: str) -> tuple[str, str]:
    """``genu`` or ``marker:WORD`` to (kind, argument); a clear error for anything else."""
    spec = (spec or "").strip()
    if spec == "genu":
        return "genu", ""
    if spec.startswith("marker:"):
        MarkerReward(spec.split(":", 1)[1])  # validates the word
        return "marker", spec.split(":", 1)[1].strip()
    raise ValueError(f"unknown reward {spec!r}: use genu or marker:WORD")
