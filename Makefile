# chorus: the two commands are `make demo` and `make test` (see README.md).
#
#   make deps          install missing Debian packages and create the venv with the
#                      pinned torch (tools/requirements/torch-$(TORCH).txt); quiet
#                      when all is present
#   make build         configure and build (build/)
#   make test          deps + build + every test through CTest, the sanitizer
#                      build of the torch-free core (build-asan/), clang's
#                      thread-safety and dropped-Status analysis over every
#                      file, clang-format (check-format), the code's shape
#                      (check-structure), ruff and mypy (check-python), and
#                      test-device-python (the GPU machine's CPython 3.12.3 from
#                      ../shared/cpython, or test-other-torch without it)
#   make format        clang-format every C++ file in place
#   make demo          deps + build + the main job
#   make bench         deps + build + the benchmark suite -> build/bench/suite.{json,md},
#                      build/bench/suite_{throughput,memory}.png (about 20 minutes)
#   make bench-check   make bench, then its ratios against tests/bench/suite/baseline.json
#   make bench-check-short  the suite's short form against its baseline (~2 min)
#   make bench-NAME    deps + build + benchmark NAME -> build/bench/NAME.json
#   make bench-optimized-python  the fastest embedded Python: chorus on CPython 3.12.3
#                      built with PGO and LTO, the suite's control_flow at N = 1 beside
#                      that python3 and Debian's -> build-py3.12-optimized/bench/suite.json
#   make triton-examples  deps + build + Triton's Python-backend examples
#                      (../shared/triton-python/examples, skipped when absent)
#                      served unchanged, each client run unchanged
#                      -> build/triton_examples.json (also in make test)
#   make torchserve-compare  deps + build + the same .mar archives (TorchServe's test
#                      archives and examples in ../shared/torchserve, and chorus'
#                      own) on the real TorchServe 0.12 and on chorus, the same
#                      requests to both -> build/torchserve_compare.json (skipped
#                      without ../shared/torchserve or Java)
#   make test-other-torch  the interpreter core built against each of
#                      OTHER_TORCH_VERSIONS (a venv per version, as for the default)
#                      in build-torchV/, and its tests
#   make test-python PYTHON=/path/to/python3.12   the interpreter core, model
#                      loading and a served model embedding another CPython (built
#                      --enable-shared, e.g. by tools/build-python.sh from a release
#                      tarball; a venv with tools/requirements/python-core.txt is
#                      made of it unless it imports torch), in build-pyV/
#   make test-device-python  test-python's core tests on CPython 3.12.3 built from
#                      ../shared/cpython/Python-3.12.3.tar.xz (also in make test;
#                      adding python_versions_pytest to DEVICE_PYTHON_TESTS serves
#                      a model too)
#   make image         deps + build + the OCI image localhost/chorus:latest (Debian's
#                      mmdebstrap and buildah; size in build/image.json)
#   make test-image    make image, then run it with podman and call the demo model
#                      over REST and gRPC (start-to-ready in build/image.json)
#   make fuzz          every libFuzzer target (clang sanitizer build, build-asan/) for
#                      FUZZ_SECONDS (600) each: executions, coverage, crashes
#   make device-bundle PYTHON=...   build/device-bundle.tar.gz for the lent GPU
#                      machine (docs/gpu.md); make device-rehearsal tries it here
#
# PYTHON pins the Python chorus embeds (it must import torch). By default it is
# the venv that tools/make-venv.sh makes (once, in ~/.cache/chorus/venvs) from
# tools/requirements/torch-$(TORCH).txt; any other torch works:
# PYTHON=/path/to/venv/bin/python builds against that venv's.

# The newest torch served with its torchvision; and the GPU machine's.
TORCH ?= 2.14
OTHER_TORCH_VERSIONS ?= 2.11
ifeq ($(origin PYTHON), undefined)
# Evaluated once, when first needed (after `deps` has installed python3-venv).
PYTHON = $(eval PYTHON := $(shell tools/make-venv.sh tools/requirements/torch-$(TORCH).txt))$(PYTHON)
endif
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
CMAKE ?= cmake
CTEST_ARGS ?=
# AOTInductor's compiler cache (tests and the suite compile models), kept warm
# across runs as ccache's and pip's are.
export TORCHINDUCTOR_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/chorus/inductor

.PHONY: triton-examples torchserve-compare bench-optimized-python test-python test-device-python device-bundle device-rehearsal image test-image fuzz asan-build
.PHONY: all deps debian-packages print-python configure build test test-core test-asan check-thread-safety check-structure test-other-torch demo bench bench-check bench-check-short clean format check-format check-python

all: build

# Two rules: make expands a whole recipe before running its first line, and
# the venv (PYTHON) needs the Debian packages first.
deps: debian-packages
	@test -x "$(PYTHON)" || { echo "make: no Python with torch (PYTHON=$(PYTHON))" >&2; exit 1; }

debian-packages:
	@tools/install-deps.sh

# A build tree configured for another Python is configured afresh (torch's
# cached library paths would otherwise mix two torches).
configure: deps
	@if [ -f $(BUILD)/CMakeCache.txt ] && \
	    ! grep -qxF "CHORUS_PYTHON:FILEPATH=$(PYTHON)" $(BUILD)/CMakeCache.txt; then \
	  echo "make: $(BUILD)/ was configured for another Python; configuring afresh"; \
	  rm -f $(BUILD)/CMakeCache.txt; \
	fi
	@case "$(PYTHON)" in "$${XDG_CACHE_HOME:-$$HOME/.cache}/chorus/venvs/"*) \
	  tools/install-torchserve.sh $(PYTHON);; esac
	@$(CMAKE) -S . -B $(BUILD) -G Ninja -DCHORUS_PYTHON=$(PYTHON) \
	  -DCHORUS_PERF_ANALYZER=$$(tools/install-perf-analyzer.sh $(PYTHON)) \
	  -DCHORUS_EXAMPLE_CLIENT_DEPS=$$(tools/install-example-client-deps.sh $(PYTHON)) >/dev/null

build: configure
	@$(CMAKE) --build $(BUILD) -j $(JOBS)

test: check-format check-structure build check-python test-asan check-thread-safety test-device-python
	cd $(BUILD) && ctest --output-on-failure -j 1 $(CTEST_ARGS)

# The other supported torch versions (tools/requirements/torch-<version>.txt; 2.15 by
# hand, before its torchvision): the interpreter core (where the torch-version specific
# code is), placement and model loading, and their tests.
test-other-torch: deps
	@for version in $(OTHER_TORCH_VERSIONS); do \
	  python=$$(tools/make-venv.sh tools/requirements/torch-$$version.txt) && \
	  $(CMAKE) -S . -B build-torch$$version -G Ninja -DCHORUS_PYTHON=$$python >/dev/null && \
	  $(CMAKE) --build build-torch$$version -j $(JOBS) --target chorus_pyside $(CORE_TESTS) && \
	  (cd build-torch$$version && \
	   ctest --output-on-failure -j 1 -R '^($(subst $(eval) ,|,$(CORE_TESTS)))$$') || exit 1; \
	done

# The interpreter core, model loading (device placement among it) and a model
# served by chorus-server, with another CPython: the targets and tests that embed it.
CORE_TESTS = libcache_test interpreter_test placement_test model_test
PYTHON_LEG_TESTS ?= $(CORE_TESTS) python_versions_pytest
# What they need built: the tests, the Python side, and chorus-server for the served model.
PYTHON_LEG_TARGETS = $(filter-out python_versions_pytest,$(PYTHON_LEG_TESTS)) chorus_pyside \
  $(if $(filter python_versions_pytest,$(PYTHON_LEG_TESTS)),chorus-server)
# PYTHON itself when it imports torch, else a venv of it with the core's pins.
TORCH_PYTHON = $(shell $(PYTHON) -c 'import torch' 2>/dev/null && echo $(PYTHON) || \
  tools/make-venv.sh tools/requirements/python-core.txt $(PYTHON))
PY_VERSION = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')

test-python: debian-packages
	@python=$(TORCH_PYTHON) && build=build-py$(PY_VERSION) && \
	  $(CMAKE) -S . -B $$build -G Ninja -DCHORUS_PYTHON=$$python >/dev/null && \
	  $(CMAKE) --build $$build -j $(JOBS) --target $(PYTHON_LEG_TARGETS) && \
	  cd $$build && ctest --output-on-failure -j 1 -R '^($(subst $(eval) ,|,$(PYTHON_LEG_TESTS)))$$'

# The lent GPU machine's Python and torch: CPython 3.12.3 built from the release
# tarball beside the checkout (tools/build-python.sh, once into chorus' cache) and
# torch 2.11 (python-core.txt), under the core's tests (DEVICE_PYTHON_TESTS; the
# served model's chorus-server would add 84 files to a cold build, CI's time). It
# also covers the oldest torch and numpy 1.26, so without the tarball make test runs
# test-other-torch (torch 2.11 on Debian's Python) instead, and says so.
DEVICE_PYTHON_SOURCE ?= ../shared/cpython/Python-3.12.3.tar.xz
DEVICE_PYTHON_TESTS ?= $(CORE_TESTS)
test-device-python: debian-packages
	@if [ -f $(DEVICE_PYTHON_SOURCE) ]; then \
	  $(MAKE) --no-print-directory test-python PYTHON=$$(tools/build-python.sh $(DEVICE_PYTHON_SOURCE)) \
	    PYTHON_LEG_TESTS="$(DEVICE_PYTHON_TESTS)"; \
	else \
	  echo "make: skipped the Python 3.12.3 leg (no $(DEVICE_PYTHON_SOURCE)); testing torch 2.11 on Debian's Python"; \
	  $(MAKE) --no-print-directory test-other-torch; \
	fi

# The device bundle: a Release build for PYTHON (the GPU machine's Python and
# torch: 3.12 and torch 2.11.0), NCCL's test, and what they need to run there.
DEVICE_BUILD = build-device-py$(PY_VERSION)
device-bundle: debian-packages
	@python=$(TORCH_PYTHON) && \
	  $(CMAKE) -S . -B $(DEVICE_BUILD) -G Ninja -DCHORUS_PYTHON=$$python \
	    -DCMAKE_BUILD_TYPE=Release >/dev/null && \
	  $(CMAKE) --build $(DEVICE_BUILD) -j $(JOBS) --target chorus-server chorus-package-check \
	    bench_suite_runner chorus_pyside chorus_nccl $(CORE_TESTS) && \
	  tools/device_bundle/build_nccl_test.sh $$python $(DEVICE_BUILD)/gpu && \
	  tools/device_bundle/make_bundle.sh $(DEVICE_BUILD) $$python $(BUILD)/device-bundle.tar.gz

# The bundle unpacked and run here as the GPU machine will (tests/gpu/run.sh),
# every step that needs no GPU.
device-rehearsal: device-bundle
	@tools/device_bundle/rehearse.sh $(BUILD)/device-bundle.tar.gz $(TORCH_PYTHON)

# The torch-free core (Status, files, ELF edits, library cache) under
# AddressSanitizer, LeakSanitizer and UBSan, built with clang so that the
# thread-safety annotations are checked too.
# The torch-free core built by clang with ASan and UBSan (and the fuzzers).
asan-build: configure
	@$(CMAKE) -S . -B $(ASAN_BUILD) -G Ninja -DCHORUS_CORE_ONLY=ON -DCHORUS_PYTHON=$(PYTHON) \
	  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
	  -DCHORUS_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug >/dev/null
	@$(CMAKE) --build $(ASAN_BUILD) -j $(JOBS)

test-asan: asan-build
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 \
	  ctest --output-on-failure -L core

# Every libFuzzer target of the sanitizer build for FUZZ_SECONDS each (tools/fuzz.py:
# executions, coverage, crashes; $(ASAN_BUILD)/fuzz-summary.json).
# FUZZ_TARGETS: some of them only (names, e.g. "kserve_json_fuzzer").
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?=
fuzz: asan-build
	@$(PYTHON) tools/fuzz.py $(ASAN_BUILD) --seconds $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# clang's thread-safety analysis and dropped-Status check over every chorus file, with
# the main build's flags (the torch-free core is also compiled by clang above).
check-thread-safety: build
	@$(PYTHON) tools/check_thread_safety.py $(BUILD)

demo: build
	@CHORUS_PYTHON=$(PYTHON) tools/demo.sh $(BUILD)

# The OCI image (docs/deploy.md): Debian's mmdebstrap and buildah, no registry.
image: build
	@tools/install-deps.sh image
	@tools/image/build.sh $(BUILD) $(PYTHON)

test-image: image
	@PYTHONPATH=$(BUILD)/share/chorus/python $(PYTHON) tools/image/test.py $(BUILD)

SUITE = PYTHONPATH=$(BUILD)/share/chorus/python $(PYTHON) tests/bench/suite

bench: build
	@$(SUITE)/suite.py --bin $(BUILD)/bin --out $(BUILD)/bench

# CPython 3.12.3 built --enable-optimizations --with-lto (tools/build-python.sh, once into
# chorus' cache: 47 minutes here, beside other builds), chorus' core built against it, and
# the suite's control_flow with one interpreter against that build's own python3
# (chorus_n1_vs_python) and Debian's (the default venv's, chorus_n1_vs_reference_python).
# docs/interpreter.md, "The fastest embedded Python".
OPTIMIZED_PYTHON_BUILD = build-py3.12-optimized
bench-optimized-python: deps
	@python=$$(tools/make-venv.sh tools/requirements/python-core.txt \
	    $$(tools/build-python.sh --optimized $(DEVICE_PYTHON_SOURCE))) && \
	  $(CMAKE) -S . -B $(OPTIMIZED_PYTHON_BUILD) -G Ninja -DCHORUS_PYTHON=$$python >/dev/null && \
	  $(CMAKE) --build $(OPTIMIZED_PYTHON_BUILD) -j $(JOBS) --target bench_suite_runner chorus_pyside && \
	  PYTHONPATH=$(OPTIMIZED_PYTHON_BUILD)/share/chorus/python $$python tests/bench/suite/suite.py \
	    --bin $(OPTIMIZED_PYTHON_BUILD)/bin --out $(OPTIMIZED_PYTHON_BUILD)/bench \
	    --models control_flow --workers 1 --ratio-workers 1 --rounds 9 \
	    --modes eager,reference,chorus --reference-python $(PYTHON)

bench-check: bench
	@$(SUITE)/check.py $(BUILD)/bench/suite.json tests/bench/suite/baseline.json

# The short form (about 2 minutes) against its own baseline, a failure
# confirmed by a second run (make test only prints these ratios).
bench-check-short: build
	@PYTHONPATH=$(BUILD)/share/chorus/python tests/bench/suite/short_check.sh $(PYTHON) \
	  $(BUILD)/bin $(BUILD)/bench

bench-%: build
	@$(BUILD)/bin/bench_$* --out $(BUILD)/bench/$*.json

# Triton's examples against chorus-server on ports 8000-8002 (which must be
# free): tests/triton_examples/run_examples.py.
triton-examples: build
	@$(PYTHON) tests/triton_examples/run_examples.py --build $(BUILD) \
	  --client-path $$(tools/install-example-client-deps.sh $(PYTHON))

# TorchServe itself needs its Java frontend: installed here, not by make deps.
torchserve-compare: build
	@tools/install-torchserve.sh $(PYTHON) --frontend
	@$(PYTHON) tests/torchserve_compare/compare.py --build $(BUILD)

# The Python the build embeds (for running chorus' Python tools and examples).
print-python: deps
	@echo $(PYTHON)

# Every C++ file git knows (tracked, or new and not ignored).
CXX_SOURCES = git ls-files --cached --others --exclude-standard '*.cc' '*.h'

format:
	@$(CXX_SOURCES) | xargs clang-format -i

# ruff over every Python file, and mypy over chorus' package as the build
# tree holds it (with the generated gRPC modules and their .pyi types).
check-python: build
	@lint=$$(tools/make-venv.sh tools/requirements/lint.txt) && bin=$$(dirname $$lint) && \
	  $$bin/ruff check --quiet --config python/pyproject.toml python server/tests examples tests tools && \
	  echo "ruff: clean" && \
	  cd $(BUILD)/share/chorus/python && $$bin/mypy --config-file $(CURDIR)/python/pyproject.toml \
	    --cache-dir $(abspath $(BUILD))/mypy-cache

# The code's shape (docs/architecture.md): which folder includes which, files
# of at most 600 lines, functions of at most 60, each folder's main header.
check-structure: debian-packages
	@lint=$$(tools/make-venv.sh tools/requirements/lint.txt) && $$lint tools/check_structure.py && \
	  $$lint -m pytest -q -p no:cacheprovider tools/check_structure_test.py tools/check_thread_safety_test.py

check-format: debian-packages
	@$(CXX_SOURCES) | xargs clang-format --dry-run --Werror && echo "clang-format: clean"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-torch*
