"""Characters that change how text around them is shown, without being seen themselves.

``BIDI_CONTROLS`` are the bidirectional marks, embeddings, overrides and isolates (U+061C,
U+200E/U+200F, U+202A-U+202E, U+2066-U+2069): they reorder what is shown around them, so that an
identifier holding one (``"q1\\u202egpj.exe"``) reads on a page or in an export as another
(``q1exe.jpg``). Free text in a right-to-left language may need them; an identifier never does.
Other format characters are not here (the zero-width joiner of emoji sequences, the non-joiner
Persian spelling needs, the soft hyphen): they do not reorder anything."""
from __future__ import annotations

BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def bidi_controls_in(text: str) -> list[str]:
    """The bidirectional controls ``text`` holds, each once, in order of first appearance, as
    ``U+XXXX`` (what an error message can show: the characters themselves would reorder it)."""
    return list(dict.fromkeys(f"U+{ord(char):04X}" for char in text if char in BIDI_CONTROLS))
