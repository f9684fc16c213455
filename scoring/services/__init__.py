"""Services of the scoring app (every write goes through these)."""
from .outcomes import outcomes_import, outcomes_study_create  # noqa: F401
from .results_folder import score_run_export  # noqa: F401
from .runs import ScoringQueueUnavailable, score_run_enqueue  # noqa: F401
from .score import study_score  # noqa: F401
