"""Plain participant links: for lab sessions and platforms without an API. No money moves; the
links themselves are rows made by ``annotations.services.links``."""
from __future__ import annotations

from decimal import Decimal

from studies.models import Platform

from .base import CostEstimate, CrowdPlatform, PublishedTask, RemoteSubmission, TaskSpec, money


class LinkPlatform(CrowdPlatform):
    name = Platform.LINK
    moves_money = False

    def estimate_cost(self, *, spec_reward: Decimal, n_tasks: int, max_assignments_per_hit: int = 9) -> CostEstimate:
        reward = money(spec_reward)
        rewards = money(reward * n_tasks)
        return CostEstimate(
            platform=self.name, currency="USD", n_tasks=n_tasks, reward_per_task=reward, rewards=rewards,
            fee_rate=Decimal("0"), fees=Decimal("0.00"), total=rewards,
            notes=["Links: no platform fee, and the app pays no one; pay participants as your lab does."],
        )

    def balance(self) -> Decimal | None:
        return None

    def publish(self, *, spec: TaskSpec, index: int = 0, max_assignments: int = 0) -> PublishedTask:
        return PublishedTask(external_id="", index=index, max_assignments=spec.n_tasks)

    def sync(self, *, external_ids: list[dict]) -> list[RemoteSubmission]:
        return []

    def approve(self, *, platform_assignment_id: str, feedback: str = "") -> dict:
        return {}

    def reject(self, *, platform_assignment_id: str, feedback: str, category: str = "") -> dict:
        return {}

    def bonus(self, *, worker_id: str, platform_assignment_id: str, amount: Decimal, reason: str,
              token: str, study_external_id: str = "") -> dict:
        return {"recorded": True}

    def block(self, *, worker_id: str, reason: str) -> dict:
        return {"blocked": True}

    def close(self, *, external_ids: list[dict]) -> dict:
        return {}
