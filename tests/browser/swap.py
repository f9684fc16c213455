"""Waiting for the next worker page in a browser. The step page's script sends an answer with
fetch and swaps the reply in place (templates/jinja2/annotations/base.html): no navigation
happens, so ``wait_for_load_state`` or ``expect_navigation`` would not wait for it. The script
counts the pages it swapped in on ``<html data-pages>``; ``next_page`` waits for that count to move."""
from __future__ import annotations

from contextlib import contextmanager

from playwright.sync_api import Page

_COUNT = "() => document.documentElement.dataset.pages || '0'"


@contextmanager
def next_page(page: Page):
    """``with next_page(page): <send the answer form>`` returns once the next page is in place."""
    before = page.evaluate(_COUNT)
    yield
    page.wait_for_function("n => (document.documentElement.dataset.pages || '0') !== n", arg=before)
