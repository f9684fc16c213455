"""What an admin page's form sends as it stands, for tests that post it back."""
from __future__ import annotations


def admin_form_data(page) -> dict:
    """Every field of the page's main form with its current value (empty for none), and the hidden
    initial values a browser sends for fields with a callable default."""
    data = {}
    for field in page.context["adminform"].form:
        value = field.value()
        data[field.html_name] = "" if value is None else value
        if field.field.show_hidden_initial:
            data[field.html_initial_name] = data[field.html_name]
    return data
