"""How the admin shows long text in a list column: cut to a length, the whole text on hover."""
from __future__ import annotations

from django.utils.html import format_html
from django.utils.text import Truncator


def short_text(text: str | None, n: int = 80) -> str:
    """``text`` cut to ``n`` characters (an ellipsis marks the cut)."""
    return Truncator(text or "").chars(n)


def short_text_with_title(text: str | None, n: int = 90) -> str:
    """``short_text`` whose hover title is the whole text; a dash for no text."""
    text = text or ""
    return format_html('<span title="{}">{}</span>', text, short_text(text, n)) if text else "—"
