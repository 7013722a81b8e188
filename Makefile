# Every target installs what it needs into a local virtual environment (.venv) from the
# pinned lock file, so `make run` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast bench lock clean browser screenshots

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip==25.2"
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/dcsim run scenarios/default.yaml

# The dashboard's browser test drives Debian's Chromium (never `playwright install`).
browser:
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)

# Every dashboard view at 1600 px with 3 and 5 fleets -> docs/dashboard-<view>-<n>fleets.png
# (the browser tests take them while checking that no text is clipped).
screenshots: $(STAMP) browser
	DCSIM_SCREENSHOTS=docs $(BIN)/python -m pytest -q tests/sim/test_dashboard_browser.py

test: $(STAMP) browser
	$(BIN)/python -m pytest -q -n 2

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m "not slow"

bench: $(STAMP)
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_mixed.py

clean:
	rm -rf $(VENV) .pytest_cache
