"""Suite-wide guards."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _keep_main_module():
    """Streamlit's AppTest leaves `sys.modules['__main__']` pointing at dashboard/app.py. Processes
    started later with multiprocessing's spawn would then re-run the app as their main module and
    die before doing any work; restore the real one after every test."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main
