# The two commands of the README:  `make demo`  and  `make test`.
# Both create .venv (Python >= 3.12) and install the package on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test fuzz lint typecheck bench bench-models bench-kernels bench-calibrate devwheels clean

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

# the nightly-sized fuzz run: 10,000 random programs per property (API fuzz against numpy, random fusion DAGs,
# tensor properties), each checked against an independent model; hours, not minutes
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=nightly $(PY) -m pytest -q -n auto tests/test_api_fuzz.py tests/test_tensor_properties.py \
	  tests/test_fusion.py -k "random or fuzz or propert"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mypy egraph_compiler

# mypy over the whole package (egraph_compiler/{rules,extract,backends} are links to the checkout's folders, so
# a plain checkout and mypy resolve them as installed); clean, and checked by the tests (tests/test_style.py)
typecheck: $(STAMP)
	$(PY) -m mypy egraph_compiler

# the benchmark tables: micro-kernels (bench/run.py, against numpy and tinygrad), real models (bench/models.py,
# against PyTorch eager and torch.compile), GEMM/convolution shapes (bench/kernels.py, against numpy and
# PyTorch) and serving figures (bench/serving.py: call overhead, streaming, repeat optimize, memory plan);
# installs the [bench] and [models] extras first.
# Arguments through BENCH_ARGS, MODELS_ARGS and KERNELS_ARGS, e.g.  make bench KERNELS_ARGS="--cpu haswell"
BENCH_ARGS ?=
MODELS_ARGS ?=
KERNELS_ARGS ?=
bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench,models]'
	$(PY) bench/run.py $(BENCH_ARGS)
	$(PY) bench/models.py $(MODELS_ARGS)
	$(PY) bench/kernels.py $(KERNELS_ARGS)
	$(PY) bench/serving.py

bench-kernels: $(STAMP)
	$(PY) -m pip install -q -e '.[models]'
	$(PY) bench/kernels.py $(KERNELS_ARGS)

bench-calibrate: $(STAMP)
	$(PY) bench/calibrate.py $(CALIBRATE_ARGS)

bench-models: $(STAMP)
	$(PY) -m pip install -q -e '.[models]'
	$(PY) bench/models.py $(MODELS_ARGS)

# wheels a GPU machine without network needs (bench/gpu_session.sh): egglog and what it imports, for CPython 3.12
devwheels: $(STAMP)
	rm -rf .devwheels
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d .devwheels \
	  egglog==$$($(PY) -c "import importlib.metadata as m; print(m.version('egglog'))") graphviz opentelemetry-api \
	  black pytokens pathspec platformdirs

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
