"""Stored scoring results. ``ScoreRun`` keeps a study's whole ``results.json``; ``UnitScore``
holds one row per (study, item, source): the aggregated answers and the derived scores that the
report and the API read."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from lab.transitions import StatusMachine
from studies.models import Item, RationaleSource, Study


class ScoreRun(models.Model):
    """One scoring of a study. ``results`` is the whole ``results.json`` (schema documented in
    ``scoring.services.score.study_score``; ``results["schema_version"]`` says which); ``warnings``
    repeats ``results["warnings"]`` (what was missing: units short of annotators, sources without
    predictions, ties). ``status`` goes pending -> running -> done | failed; ``error`` holds the
    message of a failed run. A running run's worker touches ``updated_at`` every few seconds
    (``scoring.services.runs.heartbeat``); a run whose heartbeat stopped lost its worker and goes
    back to pending to be queued again (``attempts`` counts the starts; see ``runs``)."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    # A failed run may be run again (the same row); a done run is final. A running run whose worker
    # died goes back to pending (queued again) or, after too many starts, to failed.
    STATUS = StatusMachine("status", {
        Status.PENDING: {Status.RUNNING, Status.FAILED},
        Status.RUNNING: {Status.DONE, Status.FAILED, Status.PENDING},
        Status.FAILED: {Status.RUNNING},
    })

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="score_runs")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    results = models.JSONField(default=dict, blank=True)
    warnings = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    task_id = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Who asked for the run (``score_run_enqueue``): their right is checked again when a worker starts
    # it (``score_run_start``), so a run queued before a share was revoked writes nothing. None with
    # ``by_operator``: a command or the operator; None without it: the account was deleted meanwhile,
    # and the run acts for nobody (refused).
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    by_operator = models.BooleanField(default=False, editable=False)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "updated_at"], name="scorerun_status_updated")]


class UnitScore(models.Model):
    """Aggregated outcome of one (item, source) unit of a utility study.

    Stable fields (the API reads them): ``n_annotators`` (answers behind the majorities),
    ``before_majority`` / ``after_majority`` (choice labels, blank on a tie), ``before_tie`` /
    ``after_tie``, ``before_correct`` / ``after_correct`` (a tie counts as wrong), ``utility``
    (1 useful, 0 unsure, -1 not useful), ``task_correct`` (the source's predicted answer was right;
    null when unknown), ``gen_u`` (-1/0/1, null without predictions), ``similarity`` (BERTScore F1
    of the rationale against the gold rationale, null when not computed), ``imported`` (the
    majorities came from an outcomes file), ``reported_utility`` (the utility the imported file
    stated, kept to check the recomputed ``utility`` against it) and ``score_run`` (the run that
    wrote the scores; None: not scored). ``n_annotators`` is None when not known (an imported file
    that does not say)."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="unit_scores")
    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="unit_scores")
    source = models.ForeignKey(RationaleSource, on_delete=models.CASCADE, related_name="unit_scores")
    # None: not known (an outcomes file that does not say how many workers answered).
    n_annotators = models.PositiveIntegerField(default=0, null=True, blank=True)
    before_majority = models.CharField(max_length=50, blank=True)
    after_majority = models.CharField(max_length=50, blank=True)
    before_tie = models.BooleanField(default=False)
    after_tie = models.BooleanField(default=False)
    before_correct = models.BooleanField(null=True, blank=True)  # null until scored
    after_correct = models.BooleanField(null=True, blank=True)
    utility = models.SmallIntegerField(null=True, blank=True)
    task_correct = models.BooleanField(null=True, blank=True)
    gen_u = models.SmallIntegerField(null=True, blank=True)
    similarity = models.FloatField(null=True, blank=True)
    # True when the aggregated answers were imported (a study run elsewhere), not collected here.
    imported = models.BooleanField(default=False)
    reported_utility = models.SmallIntegerField(null=True, blank=True)
    # The run that wrote the scores (``before_correct`` ... ``similarity``); None while the row is
    # not scored (outcomes imported, or changed by a re-import, and not scored since).
    score_run = models.ForeignKey(ScoreRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["study", "item", "source"], name="unit_score_unique"),
        ]
        indexes = [models.Index(fields=["study", "source"])]


class BundledUtility(models.Model):
    """The borrowed utility of a study imported from a study bundle, as the bundle carried it: what
    the copy's scoring uses in place of this installation's studies (``scoring.services.score.
    borrowed_utility``), so that Figure 4's ``by_utility`` (and the properties model of a study
    without utility of its own) re-score to the bundle's numbers.

    ``rows``: ``[item_id, source_id, utility, orig_after_correct, orig_before_correct, study_id]``
    per (item, source), with this installation's item and source ids and the lending study's id
    where the bundle was made; ``provenance``: where the table came from, as the bundle's
    ``settings.json`` says (the rule, the lending studies with their score runs, whether the table is
    the one the bundle's results.json was scored with). ``rows`` is None when the bundle had no
    table (made before bundles carried one): ``reason`` then says why those figures cannot be
    reproduced, and the copy never borrows from this installation's studies instead."""

    study = models.OneToOneField(Study, on_delete=models.CASCADE, related_name="bundled_utility")
    rows = models.JSONField(null=True, blank=True)
    provenance = models.JSONField(default=dict, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
