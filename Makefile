# Two entry points: `make demo` runs the main job, `make test` runs the whole suite.
# Both build .venv themselves (Python 3.12, see .python-version).
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow lint docs dist bench zarr-suite conformance conformance-results clean

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 12), f"zarrext needs Python >= 3.12, {sys.executable} is {sys.version}"'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/zarrext demo

test: $(STAMP)
	$(VENV)/bin/python -m pytest -n 2 -q -m "not slow"

# Fault injection and stress runs (minutes); CI runs them after `make test`.
test-slow: $(STAMP)
	$(VENV)/bin/python -m pytest -n 2 -q -m slow

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks conformance
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The sdist and the wheel in dist/, checked as the package index checks them.
dist: $(STAMP)
	rm -rf dist
	$(VENV)/bin/python -m build --outdir dist
	$(VENV)/bin/twine check --strict dist/*

# The documentation site (docs/, mkdocs.yml) into site/, strict: a warning, a broken
# link or an unresolved reference fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# The bench extra adds the peers bench_peers.py measures against (zarrs-python).
bench: $(STAMP)
	$(VENV)/bin/pip install --quiet -e ".[bench]"
	$(VENV)/bin/python benchmarks/run_all.py

# zarr-python's own tests from the sdist of the installed zarr, without and with zarrext
# (downloads the sdist and builds a scratch venv in .zarr-suite/; minutes; not in CI).
zarr-suite: $(STAMP)
	$(VENV)/bin/python scripts/zarr_suite.py --workdir .zarr-suite

# The reference corpus (conformance/) against every implementation installed here:
# zarrext, zarr+zarrext, zarr-python by itself, tensorstore, zarrs-python; one table each.
conformance: $(STAMP)
	$(VENV)/bin/python -m conformance.run --impl all --report-only

# Regenerate conformance/RESULTS.md from the runner's output, and the summary of it on the
# documentation's Interoperability page.
conformance-results: $(STAMP)
	$(VENV)/bin/python -m conformance.run --impl all --markdown > conformance/RESULTS.md
	$(VENV)/bin/python -c 'from pathlib import Path; from conformance.run import with_readme_summary as w; r = Path("docs/interoperability.md"); r.write_text(w(r.read_text(), Path("conformance/RESULTS.md").read_text()))'

clean:
	rm -rf $(VENV) dist
