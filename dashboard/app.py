"""ppsd dashboard: `streamlit run dashboard/app.py` (or `make dashboard`).

The entry script sets up the page, draws the sidebar (data source) and hands over to the page
the user picked. Pages live in dashboard/views/, one file each; they read folders only (profiles,
validations) and never import torch: profiling runs as a `ppsd profile` subprocess.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `streamlit run dashboard/app.py` puts dashboard/ on sys.path, not the repository root; the
# pages import `dashboard.*`, `ppsd.*` and `sim.*` from the root.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from dashboard import ui  # noqa: E402

# Not `pages/`: a pages/ folder beside the entry script switches Streamlit (and AppTest) into the
# legacy directory mode, where a page runs without this entry script (no sidebar).
PAGES_DIR = Path(__file__).resolve().parent / "views"

st.set_page_config(page_title="ppsd: will self-speculative decoding pay off?", page_icon=":material/speed:",
                   layout="wide")

PAGES = [
    st.Page(PAGES_DIR / "overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page(PAGES_DIR / "profile.py", title="Profile", icon=":material/timer:"),
    st.Page(PAGES_DIR / "planner.py", title="What-if planner", icon=":material/tune:"),
    st.Page(PAGES_DIR / "timeline.py", title="Timeline", icon=":material/view_timeline:"),
    st.Page(PAGES_DIR / "validation.py", title="Validation", icon=":material/fact_check:"),
    st.Page(PAGES_DIR / "traffic.py", title="Under traffic", icon=":material/traffic:"),
    st.Page(PAGES_DIR / "profile_model.py", title="Profile a model", icon=":material/play_circle:"),
]

page = st.navigation(PAGES)
ui.sidebar_sources()
with ui.guard(page.title):
    page.run()
