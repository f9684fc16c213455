"""Models of the studies app, one module per area; import from ``studies.models``."""
from .access import ApiToken  # noqa: F401
from .core import (  # noqa: F401
    YES_NO_CHOICES,
    Dataset,
    GeneralizationQuestion,
    ImportRecord,
    Item,
    Rationale,
    RationaleSource,
    Split,
    Study,
)
from .lm import GenUPrediction  # noqa: F401
from .lm import GenerationFailure, GenerationJob, QuestionGenerator  # noqa: F401
