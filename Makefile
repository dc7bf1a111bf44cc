# Two commands set everything up on a fresh machine: `make lab` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Where a CPU build of torch comes from when no local wheel is found.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
JOBS ?= $(shell nproc)

.PHONY: env lab test lint release check-release outputs bench gpu-reference gpu-wheels grade system-packages book clean

env: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# torch first, so the project's `torch` requirement never pulls a multi-GB CUDA build:
	@# a CPU wheel from pip's find-links if there is one, else PyTorch's CPU index.
	$(PY) -c "import torch" 2>/dev/null || { \
	  if $(PY) -m pip install --quiet --no-index --no-deps torch 2>/dev/null; \
	  then $(PY) -m pip install --quiet torch; \
	  else $(PY) -m pip install --quiet torch --index-url $(TORCH_CPU_INDEX); fi; }
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# Debian packages the tests need: bubblewrap isolates graded submissions; Chromium runs the
# browser tests (Playwright drives it); npm fetches MathJax for `make book`. Installed when we are root with apt, else reported.
DEBIAN_PACKAGES := bwrap:bubblewrap chromium:chromium npm:npm
system-packages:
	@for pair in $(DEBIAN_PACKAGES); do \
	  command -v $${pair%%:*} >/dev/null && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && apt-get install -y -qq $${pair#*:}) >/dev/null \
	      || echo "note: could not install $${pair#*:}"; \
	  else echo "note: $${pair#*:} is not installed; the tests that need it will fail"; fi; \
	done

# Containers often run as root, which JupyterLab refuses without --allow-root. The course
# config makes nbgrader's Validate button treat stderr (torch's warnings) as plain output.
lab: env
	JUPYTER_CONFIG_PATH=$(CURDIR)/grading $(VENV)/bin/jupyter lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

lint: env
	$(VENV)/bin/ruff check .

release: env
	$(PY) -m grading release

# CI: the release must be exactly what `make release` makes from solutions/.
check-release: release
	@git diff --exit-code --stat -- notebooks \
	  && test -z "$$(git status --porcelain -- notebooks)" \
	  || { echo "notebooks/ is stale: run 'make release' and commit"; exit 1; }

outputs: env
	$(PY) -m grading outputs

# Tests whose outcome depends on the size of the cache a benchmark must defeat (marker
# cache_size): run at a laptop's 8 MiB, a server's 260 MiB and a 1 GiB L3
# (TEXTBOOK_LLC_BYTES), instead of once at the host's size. Chapters 4 and 5, which time
# memory through the cache defeat, run whole there under nbval (the plugin cache_chapters
# marks their cells), each chapter on its own worker (--dist loadfile), and not again in
# the last nbval run, which runs the other chapters.
# kernel_retry: a kernel that dies as it starts (two workers, one port) is started again.
# slow_first: files holding a slow test are handed to the workers first.
LLC_SIZES ?= 8MiB 260MiB 1GiB
CACHE_TESTS := tests/helpers/test_timing.py tests/helpers/test_ceilings.py \
  tests/helpers/test_bench.py tests/helpers/test_sweep.py \
  tests/grading/test_grading_validate_cache.py
CACHE_CHAPTERS := solutions/04_timing solutions/05_matmuls
NBVAL := PYTHONPATH=tests/plugins $(VENV)/bin/pytest -p kernel_retry -p cache_chapters

test: env system-packages lint check-release
	PYTHONPATH=tests/plugins $(VENV)/bin/pytest -p slow_first -n $(JOBS) --dist loadfile \
	  --durations=25 -m "not cache_size" tests
	@for size in $(LLC_SIZES); do \
	  echo "== tests marked cache_size at TEXTBOOK_LLC_BYTES=$$size"; \
	  TEXTBOOK_LLC_BYTES=$$size $(NBVAL) -n $(JOBS) --dist loadfile --durations=5 \
	    -m cache_size $(CACHE_TESTS) --nbval $(CACHE_CHAPTERS) || exit 1; \
	done
	$(NBVAL) -n $(JOBS) --dist loadfile -m "not cache_size" --nbval solutions

# The chapters as a static HTML site in build/book/ (MathJax comes from the npm registry).
book: env
	$(PY) -m grading book

bench: env
	$(PY) -m helpers.programs.bench $(BENCH_ARGS)

# The GPU edition of chapters 4-7 (helpers/data/gpu/<device>/), with the machine's own CUDA
# torch: no venv, nothing from a registry. WHEELS=.whl supplies the Jupyter stack where it is
# missing (`make gpu-wheels` downloads it on a machine that reaches PyPI).
WHEELS ?=
gpu-reference:
	PYTHONPATH=.$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m helpers.programs.gpu_reference --device cuda \
	  $(if $(WHEELS),--wheels $(WHEELS)) $(GPU_REFERENCE_ARGS)

gpu-wheels:
	PYTHONPATH=. $(PYTHON) -m helpers.programs.gpu_reference --download-wheels $(or $(WHEELS),.whl)

grade: env system-packages
	$(PY) -m grading grade $(GRADE_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
