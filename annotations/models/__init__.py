"""Models of the annotations app, one module per area; import from ``annotations.models``."""
from .core import (  # noqa: F401
    Annotation,
    Assignment,
    AssignmentUnit,
    AttentionCheck,
    Participant,
    QualificationGrant,
    QualificationQuestion,
    QualificationTest,
    Unit,
)
from .providers import (  # noqa: F401
    Bonus,
    MTurkQualificationType,
    OpenLink,
    ParticipantLink,
    ProviderCall,
    ProviderSubmission,
    Publication,
)
