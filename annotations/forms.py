"""Forms of the worker pages. They only parse; the services validate and store."""
from __future__ import annotations

from django import forms

from annotations.services.steps import RATIONALE_PROPERTIES, VALIDATION_FIELDS
from studies.choices import LABEL_MAX

PAYLOAD_FIELDS = tuple(name for name, _ in VALIDATION_FIELDS) + ("corrected_answer", "flag") + tuple(
    name for name, _ in RATIONALE_PROPERTIES
)
# An answer or payload label longer than ``LABEL_MAX`` (no choice offered is: ``studies.choices``)
# is refused with its field named, never cut to fit. The free-text note is the exception: its
# textarea's ``maxlength`` counts a line break once but the browser sends it as CRLF, so a note the
# page accepted can arrive longer; the flag service keeps its first FLAG_NOTE_MAX characters.
NOTE_FIELDS = ("flag_note",)


class AnswerForm(forms.Form):
    claim = forms.IntegerField(min_value=1)
    step = forms.CharField(max_length=20)
    answer = forms.CharField(max_length=LABEL_MAX, required=False)
    shown = forms.CharField(max_length=500, required=False)

    def clean(self):
        data = super().clean()
        for name in PAYLOAD_FIELDS:
            if len(self.data.get(name, "")) > LABEL_MAX:
                self.add_error(None, f"{name}: at most {LABEL_MAX} characters")
        return data

    def problems(self) -> str:
        """What is wrong with the form, each field named: ``claim: Enter a whole number.; ...``."""
        return "; ".join(f"{name}: {' '.join(errors)}" if name != "__all__" else " ".join(errors)
                         for name, errors in self.errors.items())

    def payload(self) -> dict:
        """The multi-question answers (validation, properties) present in the POST (each label within
        its limit: ``clean``), and the flag's note (the flag service keeps its first FLAG_NOTE_MAX
        characters)."""
        return {name: self.data.get(name, "") for name in (*PAYLOAD_FIELDS, *NOTE_FIELDS) if name in self.data}


def qualification_answers(data) -> dict[str, str]:
    """``q_<question id>`` fields of the qualification form, as question id -> label (graded only
    if it is one of the question's labels: ``qualification_submit``; nothing is cut to fit)."""
    return {key[2:]: str(value) for key, value in data.items() if key.startswith("q_")}
