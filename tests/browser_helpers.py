"""What the browser tests need: Playwright and Debian's chromium.

Where either is missing the tests are skipped, except in CI (``CI`` set),
where `make test` installs both and a missing one fails the run: five
browser files must not vanish from a CI run unnoticed.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

import pytest

CHROMIUM = "/usr/bin/chromium"


def playwright_or_skip() -> ModuleType:
    """``playwright.sync_api``, once chromium is known to be there (module level)."""
    try:
        api = importlib.import_module("playwright.sync_api")
    except ImportError as e:
        problem = f"Playwright cannot be imported ({e}; `make install` installs it)"
    else:
        if Path(CHROMIUM).exists():
            return api
        problem = f"no chromium at {CHROMIUM} (`make test` installs it)"
    if os.environ.get("CI"):
        pytest.fail(f"browser tests: {problem}; CI must run them", pytrace=False)
    pytest.skip(problem, allow_module_level=True)
