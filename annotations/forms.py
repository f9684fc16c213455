"""Forms of the worker pages. They only parse; the services validate and store."""
from __future__ import annotations

from django import forms

from annotations.services.steps import FLAG_NOTE_MAX, RATIONALE_PROPERTIES, VALIDATION_FIELDS

PAYLOAD_FIELDS = tuple(name for name, _ in VALIDATION_FIELDS) + ("corrected_answer", "flag") + tuple(
    name for name, _ in RATIONALE_PROPERTIES
)
# Free text is cut to the service's limit; everything else is a short label.
PAYLOAD_LIMITS = {"flag_note": FLAG_NOTE_MAX}


class AnswerForm(forms.Form):
    claim = forms.IntegerField(min_value=1)
    step = forms.CharField(max_length=20)
    answer = forms.CharField(max_length=50, required=False)
    shown = forms.CharField(max_length=500, required=False)

    def payload(self) -> dict:
        """The multi-question answers (validation, properties) present in the POST."""
        payload = {name: self.data.get(name, "")[:50] for name in PAYLOAD_FIELDS if name in self.data}
        payload.update({name: self.data.get(name, "")[:limit] for name, limit in PAYLOAD_LIMITS.items() if name in self.data})
        return payload


def qualification_answers(data) -> dict[str, str]:
    """``q_<question id>`` fields of the qualification form, as question id -> label."""
    return {key[2:]: str(value)[:50] for key, value in data.items() if key.startswith("q_")}
