"""Pure metric functions of the scoring app (SPEC sections 2-6). No Django imports here: every
function takes plain Python sequences or numpy arrays and is tested against an independent reference
in ``tests/scoring/``."""
from .agreement import fleiss_kappa, krippendorff_alpha, value_counts_matrix
from .association import conditional_entropy, correlation_ratio, entropy, theils_u
from .bootstrap import bootstrap_ci, share_cis
from .contrast import (
    consistency,
    consistent_bundle_count,
    feasible_consistency_range,
    relative_consistency,
)
from .faithfulness import CAVEATS as FAITHFULNESS_CAVEATS
from .faithfulness import caveats_for as faithfulness_caveats
from .faithfulness import comprehensiveness, sufficiency
from .labels import (
    NOT_USEFUL,
    UNSURE,
    USEFUL,
    UTILITY_CHOICES,
    UTILITY_NAMES,
    UTILITY_VALUES,
    gen_u,
    majority_index,
    majority_vote,
    utility_category,
)

__all__ = [
    "FAITHFULNESS_CAVEATS",
    "NOT_USEFUL",
    "UNSURE",
    "USEFUL",
    "UTILITY_CHOICES",
    "UTILITY_NAMES",
    "UTILITY_VALUES",
    "bootstrap_ci",
    "comprehensiveness",
    "conditional_entropy",
    "consistency",
    "consistent_bundle_count",
    "correlation_ratio",
    "entropy",
    "faithfulness_caveats",
    "feasible_consistency_range",
    "fleiss_kappa",
    "gen_u",
    "krippendorff_alpha",
    "majority_index",
    "majority_vote",
    "relative_consistency",
    "share_cis",
    "sufficiency",
    "theils_u",
    "utility_category",
    "value_counts_matrix",
]
