#!/usr/bin/env bash
# Quark with the Gen-U reward end to end on a small StrategyQA sample, on the CPU, in a scratch
# SQLite database: import the released StrategyQA splits and generalization questions (marked
# valid: the released questions, taken as the validated set, our reading of SPEC section 4), build a tiny T5 rationalizer and a tiny T5 answerer
# (tests/tiny_models.py: nothing is downloaded), register them as sources, run quark_train and
# print report.json. Needs ../shared/data/strategyqa; never copies it into the project.
#
#   benchmarks/quark/genu_strategyqa.sh [WORK_DIR] [STEPS] [ITEMS]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="${1:-$(mktemp -d /tmp/quark-genu.XXXXXX)}"
STEPS="${2:-20}"
ITEMS="${3:-16}"
DATA="${RL_SHARED_DATA:-$ROOT/../shared/data}/strategyqa"
[ -d "$DATA" ] || { echo "no StrategyQA data at $DATA (set RL_SHARED_DATA)" >&2; exit 2; }
mkdir -p "$WORK"
export DATABASE_URL="sqlite:///$WORK/db.sqlite3" RL_MODEL_DIR="$WORK/models" DJANGO_SETTINGS_MODULE=config.settings.local
unset REDIS_URL RL_REQUIRE_SERVICES
PY="$ROOT/.venv/bin/python"
cd "$ROOT"
"$PY" manage.py migrate -v0
# The released dev file has 16 answers that are neither True nor False: the importer refuses the
# whole file, so a copy without those rows (in WORK_DIR, outside the project) is imported instead.
"$PY" -c "
import json; rows = json.load(open('$DATA/generalisation_final_dev.json'))
clean = {q: [r for r in rs if r[1] in ('True', 'False')] for q, rs in rows.items()}
print('dev generalization rows dropped:', sum(len(rs) for rs in rows.values()) - sum(len(rs) for rs in clean.values()))
json.dump(clean, open('$WORK/generalisation_final_dev.json', 'w'))"
for split in train dev test; do
  "$PY" manage.py import_strategyqa "$DATA/strategyqa_processed_$split.json" --split "$split" | sed -n 1p
  source_file="$DATA/generalisation_final_$split.json"
  [ "$split" = dev ] && source_file="$WORK/generalisation_final_dev.json"
  "$PY" manage.py import_generalization "$source_file" --split "$split" --validation-status valid | sed -n 1p
done
"$PY" manage.py shell -c "
import json, torch
from pathlib import Path
from studies.lm import templates
from studies.models import RationaleSource
from tests import tiny_models as tiny
torch.set_num_threads(2)
rows = json.loads(Path('$DATA/strategyqa_processed_train.json').read_text())[:60]
items = tiny.strategyqa_prompt_items(rows, dataset='StrategyQA')
answer_pairs = [(templates.t5_answer_input(i), templates.t5_answer_target(i)) for i in items]
answer_pairs += [(templates.t5_answer_with_rationale_input(i, i.rationale), templates.t5_answer_target(i)) for i in items]
models = Path('$WORK/models')
for name, folder, extra in (('tiny-rationalizer', 'rationalizer', None), ('tiny-answerer', 'answerer', answer_pairs)):
    path = tiny.build_tiny_t5(models / folder, items, steps=50, extra_pairs=extra)
    RationaleSource.objects.update_or_create(name=name, defaults={'kind': 'lm', 'backend': 'seq2seq',
                                             'model_name_or_path': str(path)})
print('registered tiny-rationalizer and tiny-answerer')
"
START=$(date +%s)
"$PY" manage.py quark_train --policy tiny-rationalizer --dataset StrategyQA --reward genu \
  --answerer-i tiny-answerer --answerer-ir tiny-answerer --steps "$STEPS" --checkpoint-every 10 \
  --train-limit "$ITEMS" --validation-limit "$ITEMS" --heldout-limit "$ITEMS" --batch-size 8 \
  --sample-interval 10 --samples-per-item 2 --max-new-tokens 32 --lr 1e-3 --warmup-steps 2 \
  --max-accuracy-drop 0.1 --out "$WORK/report"
echo "quark_train wall time: $(( $(date +%s) - START )) s"
"$PY" -c "
import json; r = json.load(open('$WORK/report/report.json'))
print(json.dumps({k: r[k] for k in ('steps_run', 'items', 'excluded_without_questions', 'heldout', 'validation',
                                    'selected_step', 'registered_source')}, indent=1))"
