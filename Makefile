# The two commands of the README:  `make demo`  and  `make test`.
# Both create .venv (Python >= 3.12) and install the package on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $$(.ci/find-python) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m egraph_compiler.demo

# pytest exit code 5 means "no tests collected": that is a failure here, never a pass
test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist loadfile tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# the benchmark tables (bench/run.py): installs the [bench] extra (tinygrad, threadpoolctl) first.
# Arguments through BENCH_ARGS, e.g.  make bench BENCH_ARGS="--quick"  or  BENCH_ARGS="--beam --json bench.json"
BENCH_ARGS ?=
bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
