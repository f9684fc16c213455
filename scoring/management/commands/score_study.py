"""``manage.py score_study <id> [--out DIR]``: score a study, write results.json and CSV tables."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scoring.models import ScoreRun
from scoring.services import score_run_export, study_score
from scoring.services.results_folder import results_folder_prepare, task_accuracy_note, utility_note
from scoring.similarity import FIGURES_STATED_IN, recorded_model_label
from studies.models import Study


def _reason(exc: OSError, folder: str | Path) -> str:
    """What went wrong, with the path it went wrong at where that is not ``folder`` itself."""
    reason = exc.strerror or str(exc)
    return f"{reason}: {exc.filename}" if exc.filename and Path(exc.filename) != Path(folder) else reason


class Command(BaseCommand):
    help = "Score a study and write results.json plus CSV tables."

    def add_arguments(self, parser):
        parser.add_argument("study_id", type=int)
        parser.add_argument("--out", default=None, help="Output folder (default: var/scoring/study-<id>/run-<run id>).")
        parser.add_argument("--no-similarity", action="store_true", help="Skip BERTScore similarity.")
        parser.add_argument("--both-directions", action="store_true", help="Also report U(predictor | utility).")

    def handle(self, *args, study_id: int, out: str | None, no_similarity: bool, both_directions: bool, **opts):
        try:
            study = Study.objects.get(pk=study_id)
        except Study.DoesNotExist as exc:
            raise CommandError(f"No study with id {study_id}.") from exc
        if out:  # refused before a run is stored (the default folder is named by the run's id)
            try:
                results_folder_prepare(out)
            except OSError as exc:
                raise CommandError(f"Cannot write the results to {out}: {_reason(exc, out)}; nothing scored.") from exc
        run = study_score(study=study, similarity=False if no_similarity else None, both_directions=both_directions)
        if run.status != ScoreRun.Status.DONE:
            raise CommandError(f"Scoring failed: {run.error}")
        out_dir = Path(out) if out else Path(settings.VAR_DIR) / "scoring" / f"study-{study.pk}" / f"run-{run.pk}"
        try:
            paths = score_run_export(run=run, out_dir=out_dir)
        except OSError as exc:
            raise CommandError(f"Score run {run.pk} of study {study.pk} is stored, but its files could not be written "
                               f"to {out_dir}: {_reason(exc, out_dir)}.") from exc
        results = run.results
        self.stdout.write(f"Score run {run.pk} of study {study.pk} ({study.name}): {results.get('n_units_scored')} units scored.")
        counted = results.get("counted_answers")
        if counted:  # what every figure below counts (collected studies)
            self.stdout.write(
                f"  counted answers: {counted['rule']} ({counted['tasks_approved']} tasks approved, "
                f"{counted['tasks_not_reviewed']} submitted and not yet reviewed, "
                f"{counted['tasks_failing_an_attention_check']} failing an attention check)")
        shares = results.get("utility_shares") or {}
        if shares:
            self.stdout.write(f"{'source':<20}{'n':>6}{'useful':>22}{'unsure':>22}{'not useful':>22}")
            for source, row in shares.items():
                cells = "".join(
                    f"{row[c]:>8.3f} [{row[c + '_ci'][0]:.3f}, {row[c + '_ci'][1]:.3f}]" for c in ("useful", "unsure", "not_useful")
                )
                self.stdout.write(f"{source:<20}{row['n']:>6}{cells}")
            # what the shares and their intervals rest on, as the written files say (results_folder)
            self.stdout.write(f"  {utility_note(results)}")
        for key in ("theils_u_utility_given_task_accuracy", "theils_u_utility_given_gen_u",
                    "correlation_ratio_utility_similarity"):
            if key in results:
                self.stdout.write(f"{key}: " + ", ".join(
                    f"{s}={v:.4f}" if v is not None else f"{s}=n/a" for s, v in results[key].items()))
                if key.endswith("task_accuracy"):
                    self.stdout.write(f"  {task_accuracy_note(results)}")
                if key.endswith("gen_u") and (results.get("gen_u") or {}).get("method"):
                    self.stdout.write(f"  Gen-U method: {results['gen_u']['method']}")
                if key.startswith("correlation_ratio") and results.get("similarity"):
                    sim = results["similarity"]
                    self.stdout.write(f"  similarity model: {recorded_model_label(sim)} "
                                      f"(the published figures' model: {sim['paper_used']}; figures are comparable "
                                      "only with it)")
                    paper = sim.get("paper")
                    if paper and not paper.get("same_model"):
                        self.stdout.write(
                            "  published, with " + paper["model"] + f" ({FIGURES_STATED_IN}): " + ", ".join(
                                f"{s}={v:.3f}" for s, v in paper["correlation_ratio"].items()))
        check = results.get("imported_utility_check")
        if check:
            self.stdout.write(f"imported utility check: {check['mismatches']} mismatches of {check['compared']} rows")
        for warning in results.get("warnings", []):
            self.stdout.write(self.style.WARNING(f"warning: {warning}"))
        self.stdout.write(f"Wrote {len(paths)} files to {out_dir}")
