"""Skip marks for tests that need the headless Chromium of the math tests and the synthetic bench."""

from __future__ import annotations

import pytest

from olmpipe.bench.mathbrowser import BrowserNotFoundError, find_chromium


def chromium_available() -> bool:
    """True when :func:`olmpipe.bench.mathbrowser.find_chromium` finds a browser."""
    try:
        find_chromium()
    except BrowserNotFoundError:
        return False
    return True


#: ``pytestmark = NEEDS_CHROMIUM`` in a module whose every test drives the browser.
NEEDS_CHROMIUM = [pytest.mark.browser, pytest.mark.skipif(not chromium_available(),
                                                           reason="headless Chromium not installed")]
