"""Models of the studies app, one module per area; import from ``studies.models``."""
from .access import ApiToken, StudyShare  # noqa: F401
from .core import (  # noqa: F401
    YES_NO_CHOICES,
    Dataset,
    GeneralizationQuestion,
    ImportJob,
    ImportRecord,
    Item,
    Platform,
    Rationale,
    RationaleSource,
    Split,
    Study,
)
from .lm import (  # noqa: F401
    DroppedQuestion,
    GenerationFailure,
    GenerationJob,
    GenUPrediction,  # noqa: F401
    QuestionGenerator,
)
