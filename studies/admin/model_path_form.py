"""The admin's check of a ``model_name_or_path`` beside its field, for the two rows that name a
model a job loads (a rationale source, a question generator): the rule is
``studies.services.model_paths.source_model_path_problem``, asked again where the row is used."""
from __future__ import annotations

from django import forms

from studies.services.model_paths import source_model_path_problem


def with_model_path_check(form: type[forms.ModelForm], *, user) -> type[forms.ModelForm]:
    """``form`` whose ``model_name_or_path`` is refused, on the field, when ``user`` may not point
    the row at that model (another researcher's checkpoint, the lab's own folders). An unchanged
    path of a saved row is not asked again."""

    class ModelPathForm(form):
        def clean_model_name_or_path(self):
            path = self.cleaned_data.get("model_name_or_path", "")
            if self.instance.pk is None or path != self.instance.model_name_or_path:
                problem = source_model_path_problem(user=user, path=path)
                if problem:
                    raise forms.ValidationError(problem.removeprefix("model_name_or_path: "))
            return path

    ModelPathForm.__name__ = form.__name__
    return ModelPathForm
