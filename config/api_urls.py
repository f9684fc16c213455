"""The one API router, mounted at ``/api/v1/`` by ``config.urls``."""
from rest_framework.routers import DefaultRouter

from annotations.api.views import AssignmentViewSet
from cockpit.api.views import AnnotationViewSet, StudyViewSet
from scoring.api.views import ScoreRunViewSet, UnitScoreViewSet
from studies.api.jobs import GenerationJobViewSet
from studies.api.views import (
    DatasetViewSet,
    GeneralizationQuestionViewSet,
    ImportJobViewSet,
    ImportViewSet,
    ItemViewSet,
    RationaleSourceViewSet,
    RationaleViewSet,
)

app_name = "api"

# No format-suffix routes (``results.json``): the API's type is JSON (``?format=`` picks DRF's
# browsable page), and a suffix reached actions that take no ``format`` argument as a 500.
router = DefaultRouter()
router.include_format_suffixes = False
router.register("datasets", DatasetViewSet, basename="dataset")
router.register("items", ItemViewSet, basename="item")
router.register("rationale-sources", RationaleSourceViewSet, basename="rationale-source")
router.register("rationales", RationaleViewSet, basename="rationale")
router.register("generalization-questions", GeneralizationQuestionViewSet, basename="generalization-question")
router.register("studies", StudyViewSet, basename="study")
router.register("imports", ImportViewSet, basename="import")
router.register("import-jobs", ImportJobViewSet, basename="import-job")
router.register("generation-jobs", GenerationJobViewSet, basename="generation-job")
router.register("assignments", AssignmentViewSet, basename="assignment")
router.register("annotations", AnnotationViewSet, basename="annotation")
router.register("scores", UnitScoreViewSet, basename="unit-score")
router.register("score-runs", ScoreRunViewSet, basename="score-run")

urlpatterns = router.urls
