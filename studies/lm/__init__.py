"""LM generation for the studies app.

- ``templates``: the FEB rationale templates (T5 infilling, F^IR, causal few-shot), our plain F^I
  answer template (not FEB's), and the generalization question prompts.
- ``parsing``: raw outputs to (answer label, rationale), or a ``ParseFailure`` with the raw text.
- ``backends``: ``generate(prompts, decoding) -> list[list[str]]`` for seq2seq and causal
  transformers (loaded once per process, CUDA + bf16 when available) and OpenAI-compatible HTTP.
- ``questions``: dropping empty and (near-)duplicate generated questions.
- ``training``: small seq2seq / causal training loops (fine-tuning; the tiny test models in ``tests/``).
- ``genu``: the Gen-U definition (per-question score, mode, tie rule), pure and vectorised.

Jobs live in ``studies.services.generation`` and run through ``studies.tasks.run_generation_job``
on the ``lm`` queue. Nothing here imports torch at module load: the web app runs without it.
"""
