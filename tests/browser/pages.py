"""A worker's steps in Chromium that must wait for the page they lead to.

- ``consent_and_start``: the landing page's consent, and the task page it leads to, in place:
  loaded (its script set up) when the consent went the plain way (acting on a page still loading
  races the script and the form), or swapped in by the landing page's script, which puts the
  task's address in the address bar in the same step (``Content-Location``).
- ``next_page``: the step page's script sends an answer with fetch and swaps the reply in place
  (templates/jinja2/annotations/base.html): no navigation happens, so ``wait_for_load_state`` or
  ``expect_navigation`` would not wait for it. The script counts the pages it swapped in on
  ``<html data-pages>``; ``next_page`` waits for that count to move."""
from __future__ import annotations

import re
from contextlib import contextmanager

from playwright.sync_api import Page

TASK_PAGE = re.compile(r"/w/a/[\w-]+/$")


def consent_and_start(page: Page) -> None:
    """Tick the consent box, start, and wait until the task's page is in place."""
    page.get_by_label("I have read the above and agree to take part.").check()
    page.get_by_role("button", name="Start the task").click()
    page.wait_for_url(TASK_PAGE, wait_until="load")


_COUNT = "document.documentElement.dataset.pages || '0'"


@contextmanager
def next_page(page: Page):
    """``with next_page(page): <send the answer form>`` returns once the next page is in place."""
    before = page.evaluate(f"() => {_COUNT}")
    yield
    page.wait_for_function(f"n => ({_COUNT}) !== n", arg=before)
