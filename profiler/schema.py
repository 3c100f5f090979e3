"""The profile folder's contract, re-exported from its home `ppsd.profile` (torch-free; see its
modules: `files.py` documents the folder's schema). Kept so that `from profiler.schema import ...`
goes on working."""

from ppsd.profile import *  # noqa: F403 - the whole contract
from ppsd.profile import __all__  # noqa: F401
