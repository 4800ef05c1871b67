# All set-up happens here, so each of the README's two commands works on a fresh clone.
#   make run   set up, then run the main job (tunekit lr-find) on a built-in task
#   make test  set up, then run the tests (all of them; make test-fast leaves out the slow ones:
#              Ray, subprocesses, kill-and-resume, searches of more than a few seconds)
#   make docs  set up with the docs' extra, then build the site with --strict into site/ (the
#              reference, the CLI's and the benchmarks' pages generated: docs/contributing/examples.md)
#   make docs-serve  the same site served at http://127.0.0.1:8000, rebuilt as its pages change
#   make test-bench  the benchmarks' quick runs and the doctor zoo as tests (tests/test_bench_quick.py):
#              minutes of benchmark code, left out of make test
VENV   ?= .venv
PY     := $(VENV)/bin/python
# What is installed is byte-compiled once, on every core (compileall -j 0; pip's own compiling takes one):
# with PYTHONDONTWRITEBYTECODE set (as on this project's machines) nothing else writes .pyc files, and
# without them every process (Ray's workers, the CLI's subprocesses) compiles torch, Ray and Optuna again
# as it imports them (set-up 45 s without compiling, make test 17 min instead of 11).
PIP    := $(PY) -m pip
PIPI   := $(PIP) install -q
COMPILE := $(PY) -m compileall -qq -j 0 $$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") || true  # pip too leaves what fails to compile
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
# Without a GPU, the CPU build of torch: on this project's machines pip finds it on
# disk. Elsewhere, point TORCH_INDEX at PyTorch's CPU wheel index, e.g.
#   make test TORCH_INDEX="--index-url https://download.pytorch.org/whl/cpu"
TORCH_CPU   ?= torch==2.13.0
TORCH_INDEX ?=

.PHONY: setup run test test-fast test-bench bench bench-quick docs docs-serve clean
setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  $(PIPI) --no-compile "torch>=2.3"; \
	else \
	  $(PIPI) --no-compile "$(TORCH_CPU)" $(TORCH_INDEX); \
	fi
	$(PIPI) --no-compile -e ".[test,ray]"  # test: pytest, and pgserver + psycopg for the shared-study tests
	$(COMPILE)
	$(PY) -c "import torch, tunekit; print('tunekit', tunekit.__version__, '| torch', torch.__version__, '| cuda' if torch.cuda.is_available() else '| cpu')"
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/tunekit lr-find

# Two runs side by side: the serial lanes (Ray, timers, killed processes: tests/conftest.py), one test at a
# time in each, mostly waiting on processes; and the rest in parallel on the machine's cores, at a lower
# priority (nice): the lanes are the longer path, and the rest fills the time they wait. The lanes'
# output follows the other run's; make test fails if either does.
test: $(STAMP)
	@lanes=$$(mktemp); \
	$(PY) -m pytest -q -m "serial and not bench and not bench_serial" -n 3 --dist loadgroup --durations=12 > $$lanes 2>&1 & pid=$$!; \
	nice -n 10 $(PY) -m pytest -q -m "not serial and not bench and not bench_serial" -n auto --maxprocesses=4; rest=$$?; \
	wait $$pid; serial=$$?; echo "--- the serial lanes, run beside it:"; cat $$lanes; rm -f $$lanes; \
	exit $$(( rest || serial ))

# The docs' extra (MkDocs, Material, mkdocstrings) on top of the package; the test extra is not needed.
$(DOCS_STAMP): $(STAMP)
	$(PIPI) -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

test-bench: $(STAMP)
	$(PY) -m pytest -q tests/test_bench_quick.py  # one at a time: some start Ray, PostgreSQL and workers

# The full benchmarks (hours on a small machine): each writes its report to benchmarks/data/NAME_report.txt.
# corpus_lr and corpus_search score against the ground-truth grids in benchmarks/data/corpus_grid
# (python -m benchmarks.corpus_grid fills in missing ones); lr_carry chooses lr_find's carry on corpus_refine's records.
# Every benchmark the README quotes, each writing benchmarks/data/NAME_report.txt (hours on 2 cores;
# the corpus's grids and finder runs are cached in benchmarks/data, a search's runs in benchmarks/.cache).
bench: $(STAMP)
	$(PIPI) -e ".[bench,hf,lightning]"
	$(PY) -m benchmarks.step_overhead
	$(PY) -m benchmarks.probe_accuracy
	$(PY) -m benchmarks.probe_cost --shares 1,0.9,0.8,0.7,0.6,0.5
	$(PY) -m benchmarks.probe_cost
	$(PY) -m benchmarks.device_time_pricing
	$(PY) -m benchmarks.keep_cost
	$(PY) -m benchmarks.search_efficiency
	$(PY) -m benchmarks.lr_batch --loto
	$(PY) -m benchmarks.ray_overhead
	$(PY) -m benchmarks.shared_study
	$(PY) -m benchmarks.shared_study_load
	$(PY) -m benchmarks.doctor_zoo
	$(PY) -m benchmarks.their_tuners
	$(PY) -m benchmarks.corpus_grid
	$(PY) -m benchmarks.corpus_refine
	$(PY) -m benchmarks.lr_carry
	$(PY) -m benchmarks.corpus_lr
	$(PY) -m benchmarks.lr_spread
	$(PY) -m benchmarks.corpus_search

# Each benchmark's smoke run (seconds each): the same code on the smallest setting, its report to a
# temporary folder, nothing written under benchmarks/data (tests/test_bench_quick.py runs these too).
bench-quick: $(STAMP)
	$(PY) -m benchmarks.step_overhead --quick
	$(PY) -m benchmarks.probe_accuracy --quick
	$(PY) -m benchmarks.keep_cost --quick
	$(PY) -m benchmarks.search_efficiency --quick
	$(PY) -m benchmarks.lr_batch --quick
	$(PY) -m benchmarks.ray_overhead --quick
	$(PY) -m benchmarks.shared_study --quick
	$(PY) -m benchmarks.shared_study_load --quick
	$(PY) -m benchmarks.doctor_zoo --quick
	$(PY) -m benchmarks.their_tuners --quick
	$(PY) -m benchmarks.corpus --list
	$(PY) -m benchmarks.corpus_refine --quick
	$(PY) -m benchmarks.lr_carry --quick
	$(PY) -m benchmarks.corpus_lr --quick
	$(PY) -m benchmarks.lr_spread --quick
	$(PY) -m benchmarks.corpus_search --quick

clean:
	rm -rf $(VENV) *.egg-info site
