"""Models of the annotations app, one module per area; import from ``annotations.models``."""
from .core import (  # noqa: F401
    Annotation,
    Assignment,
    AttentionCheck,
    Claim,
    Participant,
    QualificationGrant,
    QualificationQuestion,
    QualificationTest,
    Unit,
)
from .entry import ConsentReceipt, PlatformAssignmentBinding  # noqa: F401
from .platforms import (  # noqa: F401
    Bonus,
    Installation,
    MTurkQualificationType,
    OpenLink,
    ParticipantLink,
    PlatformCall,
    PlatformSubmission,
    Publication,
)
from .review import WITHDRAWAL_LOCK, FlaggedAnswer, FlagReview, Withdrawal, WorkerBlock  # noqa: F401
