"""Row ids as a request or a file writes them: one rule for "is this text an id".

``str.isdigit`` is not that rule: it accepts digits ``int`` refuses (``"²"``) and digit runs too long
for ``int`` (over 4,300 digits) or for a database key. ``parse_id`` answers every text without raising."""
from __future__ import annotations

MAX_ID = 2**63 - 1  # the largest key a bigint column holds


def parse_id(text, *, maximum: int = MAX_ID) -> int | None:
    """``text`` as a whole number from 0 to ``maximum`` if it is one written in ASCII digits
    (surrounding blanks ignored), else None: never an exception, whatever the text."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if not (text and text.isascii() and text.isdigit()) or len(text) > len(str(maximum)):
        return None
    value = int(text)
    return value if value <= maximum else None
