# One-command set-up and runs. Everything installs into .venv from the project's own files.
#   make report   materialize every asset (default profile) and build the report site
#   make test     run the test suite (make test-all adds the heavy tier; make test-fast: unit tests only)
#   make test-cluster   Postgres + Celery workers + a local S3, for real (tests/cluster; installs the cluster extra)
#   make test-cuda   every experiment's smoke on an accelerator (skipped with the reason where none)
#   make lint     ruff (lint + format check) and mypy over LINT_PATHS / TYPE_PATHS
#   make test-fast  unit tests only (no materializations, no browser): about half a minute
# A GPU user picks another torch build, e.g.:  make report TORCH_SPEC="torch==2.13.0" PIP_TORCH_ARGS="--index-url <your CUDA wheel index>"
# or installs torch into .venv first and passes TORCH_SPEC=skip.

PYTHON ?= python3.11
VENV ?= .venv
TORCH_SPEC ?= -r requirements/torch-cpu.txt
PIP_TORCH_ARGS ?=
PROFILE ?= default
# Compilers the report runs the plan with, one after the other (e.g. inductor,openvino,iree: install
# them with make compilers); the default, Inductor alone, is the report as it always was.
BACKENDS ?= inductor
# What `make lint` covers: ruff (lint and format check) over LINT_PATHS, mypy over TYPE_PATHS.
LINT_PATHS ?= precisionkit pipeline benchmarks tests scripts
TYPE_PATHS ?= precisionkit pipeline benchmarks scripts
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
export DAGSTER_DISABLE_TELEMETRY = 1

BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: lock setup compilers report test test-fast test-cluster test-cuda test-torch compiler-torch lint benchmark report-time matmul-timing ui clean

$(STAMP): pyproject.toml requirements/torch-cpu.txt requirements/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	if [ "$(TORCH_SPEC)" != "skip" ]; then $(BIN)/python -m pip install --quiet $(PIP_TORCH_ARGS) $(TORCH_SPEC); fi
	$(BIN)/python -m pip install --quiet -c requirements/constraints.txt -e '.[pipeline,site,test,lint]'
	touch $(STAMP)

setup: $(STAMP)

# The fusing compilers other than Inductor (the openvino and iree extras, about 650 MB): make test
# installs them so that their adapters' tests run; make report stays Inductor-only without them.
COMPILERS_STAMP := $(VENV)/.installed-compilers
$(COMPILERS_STAMP): $(STAMP) pyproject.toml requirements/constraints.txt
	$(BIN)/python -m pip install --quiet -c requirements/constraints.txt -e '.[openvino,iree]'
	touch $(COMPILERS_STAMP)

compilers: $(COMPILERS_STAMP)

# Rewrite requirements/constraints.txt from what .venv holds now (after a change to pyproject.toml).
lock: $(STAMP)
	{ sed -n '1,3p' requirements/constraints.txt; $(BIN)/python -m pip freeze --exclude-editable \
	  | grep -v -i -E '^(torch|nvidia|triton|fusion-precision)([=-]|$$)'; } > requirements/constraints.txt.new
	mv requirements/constraints.txt.new requirements/constraints.txt

report: $(STAMP) import-results
	$(BIN)/python -m pipeline.cli report --profile $(PROFILE) $(if $(filter-out inductor,$(BACKENDS)),--backends $(BACKENDS))

# Results bundles committed under results/bundles/ (runs on other machines) join the local instance
# once; the report then shows them on the devices page and beside each experiment. A bundle that
# cannot be imported is reported and skipped, not fatal to the report.
import-results: $(STAMP)
	-@for b in results/bundles/*/; do [ -f "$$b/bundle.json" ] || continue; \
	  $(BIN)/python -m pipeline.cli import-bundle --if-new "$$b"; done

# Wheels of what a CUDA image (Python PYTHON_VERSION with torch, numpy, pyarrow, safetensors and
# transformers) lacks to run the pipeline, for a machine without a package index: carry wheelhouse/
# and the source (make gpu-source) there, then
#   python -m pip install --no-index --find-links wheelhouse dagster polars altair
# pip keeps what the image has where it satisfies the requirements. No site packages: the site is
# built at home from the run's bundle.
PYTHON_VERSION ?= 3.12
WHEELHOUSE ?= wheelhouse
WHEEL_PLATFORMS ?= manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
WHEELHOUSE_PACKAGES ?= dagster polars altair safetensors typing_extensions
wheelhouse:
	mkdir -p $(WHEELHOUSE)
	$(PYTHON) -m pip download --only-binary=:all: --implementation cp --python-version $(PYTHON_VERSION) \
	  $(addprefix --platform ,$(WHEEL_PLATFORMS)) -c requirements/constraints.txt -d $(WHEELHOUSE) $(WHEELHOUSE_PACKAGES)
	@du -sh $(WHEELHOUSE)

# The committed source as a tarball for another machine, with SOURCE_COMMIT naming its commit
# (provenance reads it where the unpacked copy is not a git checkout of its own).
gpu-source:
	rm -rf $(WHEELHOUSE)/.src && mkdir -p $(WHEELHOUSE)/.src/fusion-precision
	git archive HEAD | tar -x -C $(WHEELHOUSE)/.src/fusion-precision
	git rev-parse HEAD > $(WHEELHOUSE)/.src/fusion-precision/SOURCE_COMMIT
	tar -czf $(WHEELHOUSE)/fusion-precision-src.tar.gz -C $(WHEELHOUSE)/.src fusion-precision
	rm -rf $(WHEELHOUSE)/.src

# Two pytest-xdist workers: the tests that read the session's smoke run share one (tests/conftest.py puts them in
# one group, so it is made once; experiments' smoke tests read their part of it rather than materialize it again),
# every other file's tests stay together on either, groups handed out costliest first (tests/conftest.py;
# --no-loadscope-reorder keeps that order). On an idle 2-core AMD EPYC (AVX-512), from a fresh clone with a cold
# Inductor cache (.ci/run, 2026-11-30 04:25 and 04:39): 1561 tests in 10 min 18 s, the smoke run they share 3.6 min
# of it; 10 min 39 s for the code before those tests read it (the same hour: this machine's speed varies by up to a
# fifth between hours, so compare runs of one hour). The two workers are busy 97 % of the time and end within
# seconds of each other, so only less work shortens the run. Of its about 1420 CPU-seconds (2026-11-30, on b6cf911,
# before the bytecode change below and the shared run's reuse), 517 were the workers' own Python (Dynamo, Inductor,
# the tests), 478 the C++ compiler (557 calls, 218 of them in the smoke run) and 297 the 211 interpreters the tests
# start.
# TEST_WORKERS=0 runs them in this process.
# Then the tests marked isa_sensitive again under each ATen CPU capability below the CPU's own
# (scripts/isa-sensitive-tests.sh): a value that depends on the vector ISA must not pass by luck of the machine.
# OMP_WAIT_POLICY=PASSIVE: two workers, each with an OpenMP team as wide as the machine, oversubscribe its cores,
# and GNU OpenMP's threads spin after each parallel region on a core the other worker needs. Passive waiting
# changes no value; on an EPYC with 2 cores (2026-11-29, another process beside) a subset of D's and the tester's
# tests took 54.0 and 57.4 s against 60.0 and 58.7 s, and two processes of small parallel ops side by side 6-7 s
# against 19-46 s.
TEST_WORKERS ?= 2
# Bytecode is written for the tests even where the shell sets PYTHONDONTWRITEBYTECODE (as the shell of the machine
# these figures come from does): about 200 interpreters start during the suite (reproducers, workers, the CLI), each
# compiling the project's sources again without it. Measured on the EPYC (2026-11-30): importing the pipeline and
# the tester in a fresh interpreter 5.7 s without it, 5.1 s with it; collecting the suite 14.6 and 15.2 s without
# it, 18.8 s the first time with it (it writes the bytecode: both workers of a fresh clone pay that) and 11.0 and
# 8.9 s after, as the ISA re-runs below do. The bytecode goes to the __pycache__ folders git ignores.
TEST_ENV = env -u PYTHONDONTWRITEBYTECODE OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE}
test: $(STAMP) $(COMPILERS_STAMP)
	./scripts/ensure-chromium.sh
	$(TEST_ENV) $(BIN)/python -m pytest -m "not heavy and not cluster" $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder)
	$(TEST_ENV) PY=$(BIN)/python ./scripts/isa-sensitive-tests.sh

# The scale-out path for real, on this machine: a throwaway Postgres (Dagster's run, event-log and
# schedule storage), Redis and two Celery workers run the code location's all_assets_celery job, and a
# local S3 server (moto) holds stored values (FUSION_DATA_DIR=s3://...). Every server listens on a free
# 127.0.0.1 port in a temporary folder and is stopped by the tests. Installs Debian's postgresql and
# redis-server when missing (as root) and the cluster extra into .venv.
CLUSTER_STAMP := $(VENV)/.installed-cluster
$(CLUSTER_STAMP): $(STAMP) pyproject.toml requirements/constraints.txt
	$(BIN)/python -m pip install --quiet -c requirements/constraints.txt -e '.[cluster]'
	touch $(CLUSTER_STAMP)

test-cluster: $(CLUSTER_STAMP)
	./scripts/ensure-cluster-services.sh
	$(TEST_ENV) $(BIN)/python -m pytest -m cluster -rs -p no:cacheprovider tests/cluster

# Everything, the heavy tier included (about half an hour on 2 cores).
test-all: $(STAMP)
	./scripts/ensure-chromium.sh
	$(BIN)/python -m pytest

# Every experiment's smoke on the accelerator (FUSION_DEVICE, e.g. cuda:1 / xpu / npu / mps; default cuda),
# then the pipeline tests on that device; skipped with the reason where torch reports no such device.
test-cuda: $(STAMP)
	$(BIN)/python -m pytest -m cuda -rs tests/pipeline/test_accelerator_smoke.py
	FUSION_DEVICE=$${FUSION_DEVICE:-cuda} $(BIN)/python -m pytest -rs tests/pipeline -m "not cuda"

# Another torch release, in its own venv (.venv-torch-<TORCH>, from PyPI: a CUDA build of several GB
# that runs on the CPU here): the unit tests, then the smoke report with its own data folder,
# Dagster instance and Inductor cache under .venv-torch-<TORCH>/run. Example: make test-torch TORCH=2.7
TORCH ?=
TORCH_VENV = .venv-torch-$(TORCH)
test-torch:
	@test -n "$(TORCH)" || { echo "usage: make test-torch TORCH=2.7 (a torch minor release)"; exit 2; }
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install --quiet "torch==$(TORCH).*"
	$(TORCH_VENV)/bin/python -m pip install --quiet -c requirements/constraints.txt -e '.[pipeline,site,test]'
	$(TORCH_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "not materializes and not slow and not browser and not cuda and not cluster"
	mkdir -p $(TORCH_VENV)/run/home && cp .dagster_home/dagster.yaml $(TORCH_VENV)/run/home/
	DAGSTER_HOME=$(CURDIR)/$(TORCH_VENV)/run/home FUSION_DATA_DIR=$(CURDIR)/$(TORCH_VENV)/run/data \
	TORCHINDUCTOR_CACHE_DIR=$(CURDIR)/$(TORCH_VENV)/run/inductor \
	$(TORCH_VENV)/bin/python -m pipeline.cli report --profile smoke --all

# Which compilers work with torch TORCH: a venv of that release with the openvino and iree extras' pins
# is built under COMPILER_TORCH_ROOT (outside the repo), probed and deleted; one JSON line per compiler
# is printed, and appended to OUT if given. Example: make compiler-torch TORCH=2.7 OUT=/tmp/rows.jsonl
COMPILER_TORCH_ROOT ?= /tmp/compiler-torch
compiler-torch: $(STAMP)
	@test -n "$(TORCH)" || { echo "usage: make compiler-torch TORCH=2.7 [OUT=rows.jsonl] (a torch minor release)"; exit 2; }
	$(BIN)/python scripts/compiler_torch_matrix.py --torch $(TORCH) --root $(COMPILER_TORCH_ROOT) $(if $(OUT),--out $(OUT))

lint: $(STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy $(TYPE_PATHS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not materializes and not slow and not heavy and not browser and not cuda and not cluster"

# report-time runs the whole default profile on the slow 16-bit path (20 minutes or more on 2 cores)
# in a temporary data folder and Dagster instance and prints where the time went; alone: make report-time
benchmark: $(STAMP)
	$(BIN)/python benchmarks/bench_toolkit.py
	$(BIN)/python benchmarks/bench_difftest.py
	$(BIN)/python benchmarks/difftest_features.py
	$(BIN)/python benchmarks/report_time.py

report-time: $(STAMP)
	$(BIN)/python benchmarks/report_time.py

# fp32 vs fp16 vs bf16 matmul on this CPU; with ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 set,
# shows that the slow 16-bit path of an AVX2-only machine is in effect.
matmul-timing: $(STAMP)
	$(BIN)/python benchmarks/bench_matmul.py

ui: $(STAMP)
	$(BIN)/dagster dev

clean:
	rm -rf $(VENV) data site/build $(WHEELHOUSE)
