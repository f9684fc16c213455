"""Gen-U under each tie rule on the released StrategyQA test data (README, Gen-U section).

The release holds no answerer predictions (neither F^I / F^IR outputs nor the models' own), so
this uses the crowd as the two answerers, a stand-in stated wherever its table is shown: for
each row of ``rationale_utility.json`` (one test question and one model's rationale), F^I
answers every generalization question of that test question with the workers' majority answer
*before* the rationale and F^IR with their majority *after* it. Each question is scored and
each item's mode taken by the project's own code (:func:`studies.lm.genu.genu_frame` and
:func:`studies.lm.genu.tie_rule_effect`, what scoring runs), under each tie rule and with tied
items left out. Questions are taken in file order ("first" follows it).

    .venv/bin/python benchmarks/scoring/genu_tie_rules.py [DATA_DIR]

DATA_DIR defaults to ``../shared/data/strategyqa`` (never copied into the project).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from studies.lm import genu  # noqa: E402


def _key(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def crowd_predictions(data: Path) -> pd.DataFrame:
    questions = json.loads((data / "generalisation_final_test.json").read_text())
    by_original = {_key(original): rows for original, rows in questions.items()}
    records, qid = [], 0
    with (data / "rationale_utility.json").open() as fh:
        for n, line in enumerate(fh):
            row = json.loads(line)
            for _text, answer, _qtype in by_original.get(_key(row["question"]), []):
                qid += 1
                gold = answer == "True"
                for code, column in (("I", "human_predicted_label_before_rationale"),
                                     ("IR", "human_predicted_label_after_rationale")):
                    records.append({"question_id": qid, "item_id": n, "source": row["rationale_source"],
                                    "answerer": code, "correct": bool(row[column]) == gold, "parsed": True})
    return pd.DataFrame.from_records(records)


def main() -> None:
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "data" / "strategyqa"
    _, per_item, _, _ = genu.genu_frame(crowd_predictions(data))
    effect = genu.tie_rule_effect(per_item)
    print("| Source | Items | Tied | Rule | n | Mean Gen-U | Useful | Unsure | Not useful |")
    print("|---|---|---|---|---|---|---|---|---|")
    for source, entry in effect.items():
        for rule in [*genu.TIE_RULES, genu.TIES_LEFT_OUT]:
            f = entry[rule]
            label = "tied items left out" if rule == genu.TIES_LEFT_OUT else rule
            print(f"| {source} | {entry['n_items']} | {entry['n_tied']} | {label} | {f['n']} | {f['mean']:.3f} | "
                  f"{f['useful']:.3f} | {f['unsure']:.3f} | {f['not_useful']:.3f} |")


if __name__ == "__main__":
    main()
