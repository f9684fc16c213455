"""django-filter filter sets of the scoring API, and the annotation filters that read scores."""
from __future__ import annotations

import django_filters as df
from django.db.models import Exists, OuterRef

from annotations.api.filters import AnnotationFilter
from lab.api.filters import ApiFilterSet, DateTimeFilter, IdFilter, WholeNumberFilter, filter_id_or_name
from scoring.metrics.labels import UTILITY_CHOICES, UTILITY_VALUES
from scoring.models import ScoreRun, UnitScore
from studies.lm.genu import SCORES as GEN_U_SCORES
from studies.models import Split


class UnitScoreFilter(ApiFilterSet):
    study = IdFilter(field_name="study_id")
    item = IdFilter(field_name="item_id")
    source = df.CharFilter(method="filter_source", help_text="Rationale source id or name.")
    split = df.ChoiceFilter(field_name="item__split", choices=Split.choices)
    utility = df.ChoiceFilter(choices=UTILITY_CHOICES, method="filter_utility", help_text="Utility category.")
    updated_after = DateTimeFilter(field_name="updated_at", lookup_expr="gte")
    updated_before = DateTimeFilter(field_name="updated_at", lookup_expr="lt")
    gen_u = WholeNumberFilter(
        min_value=min(GEN_U_SCORES), max_value=max(GEN_U_SCORES),
        help_text="Gen-U of the unit: -1, 0 or 1 (a fraction or any other number is a 400).",
    )

    class Meta:
        model = UnitScore
        fields = {"task_correct": ["exact"], "before_tie": ["exact"], "after_tie": ["exact"]}

    def filter_source(self, queryset, name, value):
        return filter_id_or_name(queryset, "source", value)

    def filter_utility(self, queryset, name, value):
        return queryset.filter(utility=UTILITY_VALUES[value])


class ScoreRunFilter(ApiFilterSet):
    study = IdFilter(field_name="study_id")
    status = df.ChoiceFilter(choices=ScoreRun.Status.choices)
    created_after = DateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = DateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = ScoreRun
        fields: list[str] = []


class ScoredAnnotationFilter(AnnotationFilter):
    """The annotation filters plus the utility category of the answered unit, once scored."""

    utility = df.ChoiceFilter(
        choices=UTILITY_CHOICES, method="filter_utility",
        help_text="Utility category of the annotated (item, source) unit, once scored.",
    )

    def filter_utility(self, queryset, name, value):
        scored = UnitScore.objects.filter(
            study=OuterRef("claim__study"),
            item=OuterRef("claim__unit__item"),
            source=OuterRef("claim__unit__source"),
            utility=UTILITY_VALUES[value],
        )
        return queryset.filter(Exists(scored))
