# Every target installs what it needs into a local virtual environment (.venv) from the
# pinned lock file, so `make run` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast bench build lock clean browser screenshots

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip==25.2"
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The engine's hot path is compiled with Cython (setup.py: each sim/**/X.py with an X.pxd).
# `pip install -e .` above compiles it; this rebuilds it after an edit of one of those files
# (until then dcsim warns and runs the Python source: same results, slower). Nothing is
# written beside the sources: the C files go to build/cython/, the extensions to build/ext/
# (sim/_build.py imports them from there); the find removes what builds before that left.
# The stamp is only touched once the compiled build is the one that runs, so after a
# failed compile (no C compiler: dcsim then runs the source) every target tries again;
# it lives in build/, so removing build/ rebuilds too.
ENGINE_PXD := $(shell find sim -name '*.pxd')
ENGINE_SRC := $(ENGINE_PXD) $(ENGINE_PXD:.pxd=.py)
BUILT := build/.built

$(BUILT): $(STAMP) setup.py $(ENGINE_SRC)
	@find sim \( -name '*.so' -o -name '*.c' \) -delete
	$(BIN)/python setup.py --quiet build_ext --inplace
	@if DCSIM_PURE_PYTHON=0 $(BIN)/python -W ignore -c "import sim._build as b, sys; sys.exit(b.ENGINE_BUILD != 'compiled')"; \
	then touch $(BUILT); \
	else echo "dcsim: the engine did not compile; it runs from the Python source (same results, ~3x slower)"; fi

build: $(BUILT)

run: $(BUILT)
	$(BIN)/dcsim run scenarios/default.yaml

# The dashboard's browser test drives Debian's Chromium (never `playwright install`).
browser:
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)

# Every dashboard view at 1600 px with 3, 5 and 8 fleets -> docs/dashboard-<view>-<n>fleets.png
# (the browser tests take them while checking that no text is clipped).
screenshots: $(BUILT) browser
	DCSIM_SCREENSHOTS=docs $(BIN)/python -m pytest -q tests/sim/test_dashboard_browser.py \
		tests/sim/test_dashboard_planning_browser.py

test: $(BUILT) browser
	$(BIN)/python -m pytest -q -n 2

test-fast: $(BUILT)
	$(BIN)/python -m pytest -q -n 2 -m "not slow"

bench: $(BUILT)
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_mixed.py

clean:
	rm -rf $(VENV) .pytest_cache build
	find sim \( -name '*.so' -o -name '*.c' \) -delete
