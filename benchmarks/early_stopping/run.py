"""Benchmark of exact early stopping (issue 24): the share of answers a study saves by stopping each
unit once its result is decided, by worker accuracy and number of choices, and on the demo study.

    .venv/bin/python benchmarks/early_stopping/run.py simulate            # the README table
    .venv/bin/python benchmarks/early_stopping/run.py demo                # the demo study, through the services

``simulate`` is pure: simulated crowds of five workers per unit (each right with probability q,
otherwise a uniformly drawn wrong choice, before and after alike), answers arriving one at a time;
a unit stops at the first answer after which ``studies.majority.outcome_decided`` (the app's
decision, on the scoring's majority and tie rule) says no remaining answer can change it. Every unit
is also checked: its majority correctness before and after and its utility equal those of all five
answers (``scoring.metrics``).

``demo`` loads the demo dataset into a fresh SQLite database (``manage.py load_demo``), creates a
copy of the demo study that stops early, and lets the same simulated crowd answer both through the
questionnaire's services (start, answer, submit); it prints the answers collected, saved and the
money saved as the progress page shows them, and checks that both studies score the same utility.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

FULL = 5


def stop_point(before, after, *, gold: int, choices: int) -> int:
    from studies.majority import outcome_decided

    for k in range(FULL + 1):
        counts = [np.bincount(step[:k], minlength=choices) for step in (before, after)]
        if outcome_decided(counts, correct=gold, remaining=FULL - k):
            return k
    raise AssertionError("five answers always decide a unit")


def simulate(units: int, seed: int) -> None:
    from scoring.metrics import majority_vote, utility_category

    rng = random.Random(seed)
    accuracies = (0.5, 0.6, 0.7, 0.8, 0.9)
    print(f"{units:,} simulated units per cell, {FULL} workers per unit, seed {seed}")
    print("| worker accuracy | yes/no (2 choices) | 4 choices |")
    print("|---|---|---|")
    for q in accuracies:
        cells = []
        for choices in (2, 4):
            collected = 0
            for _ in range(units):
                gold = rng.randrange(choices)
                wrong = [c for c in range(choices) if c != gold]
                before, after = ([gold if rng.random() < q else rng.choice(wrong) for _ in range(FULL)]
                                 for _step in range(2))
                k = stop_point(before, after, gold=gold, choices=choices)
                full = (majority_vote(before) == gold, majority_vote(after) == gold)
                stopped = (majority_vote(before[:k]) == gold, majority_vote(after[:k]) == gold)
                assert stopped == full and utility_category(*stopped) == utility_category(*full)
                collected += k
            saved = 1 - collected / (units * FULL)
            cells.append(f"{saved:.1%} ({collected / units:.2f} answers a unit)")
        print(f"| {q:.1f} | {cells[0]} | {cells[1]} |")
    print("every unit: same majority correctness before and after, and same utility, as its five answers")


def demo(q_before: float, q_after: float) -> None:
    var = tempfile.mkdtemp(prefix="rl-early-")
    os.environ["RL_VAR_DIR"] = var
    os.environ["DATABASE_URL"] = f"sqlite:///{var}/db.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")
    os.environ.setdefault("RL_SCORING_SIMILARITY", "0")
    import django

    django.setup()
    from django.core.management import call_command

    from annotations.models import Claim, Unit
    from annotations.selectors.progress import study_early_stopping
    from annotations.services.answers import annotation_submit, assignment_submit
    from annotations.services.assignment import assignment_start
    from annotations.services.errors import NoWorkAvailable
    from annotations.services.opening import study_open
    from annotations.services.participants import participant_get_or_create
    from annotations.services.platforms.access import OPERATOR
    from scoring.models import UnitScore
    from scoring.services import study_score
    from studies import demo as demo_content
    from studies.models import Platform, Study
    from studies.services.studies import study_create

    call_command("migrate", verbosity=0)
    call_command("load_demo", stdout=open(os.devnull, "w"))
    full = Study.objects.get(name=demo_content.STUDY_NAME)
    stop = study_open(study=study_create(
        name=f"{full.name} (stops early)", dataset=full.dataset, kind=full.kind, split=full.split,
        sources=list(full.sources.all()), annotators_per_unit=full.annotators_per_unit,
        units_per_task=full.units_per_task, reward=full.reward, hourly_pay_floor=full.hourly_pay_floor,
        estimated_minutes_per_task=full.estimated_minutes_per_task, platform=full.platform, owner=full.owner,
        consent_text=full.consent_text, instructions=full.instructions, stop_when_decided=True),
        user=OPERATOR)

    def answer(worker: str, claim, step: str) -> str:
        """The crowd's k-th answer to a unit is the same in both studies (whichever worker gives it),
        so the study that stops early collects a prefix of the full study's answers of each unit."""
        item = claim.unit.item
        k = Claim.objects.filter(unit_id=claim.unit_id, id__lt=claim.id).count()
        seed = hashlib.sha256(f"{k}|{item.external_id}|{claim.unit.source_id}|{step}".encode()).hexdigest()
        right = random.Random(seed).random() < (q_before if step == "before" else q_after)
        return item.gold_answer if right else ("no" if item.gold_answer == "yes" else "yes")

    for study in (full, stop):
        for n in range(200):
            worker = f"demo-worker-{n}"
            participant = participant_get_or_create(platform=Platform.LINK, external_id=worker)
            try:
                assignment = assignment_start(study=study, participant=participant, consented=True)
            except NoWorkAvailable:
                continue
            for claim in assignment.claims.select_related("unit__item").order_by("position"):
                for step in ("before", "after"):
                    annotation_submit(assignment=assignment, claim=claim, step=step, answer=answer(worker, claim, step))
            assignment_submit(assignment=assignment)
        assert not Unit.objects.filter(study=study, n_completed__lt=models_quota()).exists()
        study_score(study=study, similarity=False)

    def utilities(study):
        return {(u.item_id, u.source_id): u.utility for u in UnitScore.objects.filter(study=study)}

    same = utilities(full) == utilities(stop)
    early = study_early_stopping(study=stop)
    units = Unit.objects.filter(study=stop).count()
    print(f"demo study: {units} units x {stop.annotators_per_unit} workers, crowd right {q_before:.0%} before, "
          f"{q_after:.0%} after")
    print(f"answers collected {early.answers_collected} of {early.answers_designed}; saved {early.answers_saved} "
          f"({early.percent_saved}%), {early.units_decided} units stopped early (decided before their last worker)")
    print(f"money saved: {early.money_saved} {early.currency} ({early.cost_per_answer} an answer)")
    print(f"utility of every unit equal to the full study's: {same}")
    assert same


def models_quota():
    from django.db.models import F

    return F("quota")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sim = sub.add_parser("simulate")
    sim.add_argument("--units", type=int, default=20000)
    sim.add_argument("--seed", type=int, default=24)
    dem = sub.add_parser("demo")
    dem.add_argument("--q-before", type=float, default=0.7)
    dem.add_argument("--q-after", type=float, default=0.8)
    args = parser.parse_args()
    if args.cmd == "simulate":
        simulate(args.units, args.seed)
    else:
        demo(args.q_before, args.q_after)
