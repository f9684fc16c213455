"""Models of the studies app, one module per area; import from ``studies.models``."""
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
