# chorus: the two commands are `make demo` and `make test` (see README.md).
#
#   make deps          install missing Debian packages (quiet when all present)
#   make build         configure and build (build/)
#   make test          deps + build + every test through CTest, then the
#                      sanitizer build of the torch-free core (build-asan/)
#   make demo          deps + build + the main job
#   make bench         deps + build + the benchmark suite -> build/bench/suite.{json,md},
#                      build/bench/suite_{throughput,memory}.png (about 14 minutes)
#   make bench-check   make bench, then its ratios against tests/bench/suite/baseline.json
#   make bench-NAME    deps + build + benchmark NAME -> build/bench/NAME.json
#   make test-torch2   the interpreter core built against pip's torch 2.x, each
#                      of TORCH2_VERSIONS (tools/requirements/torch-V.txt, a venv
#                      made by tools/make-venv.sh) in build-torchV/, and its tests
#
# PYTHON pins the Python chorus embeds (it must import torch); any installed
# torch works: PYTHON=/path/to/venv/bin/python builds against that venv's.

PYTHON ?= /usr/bin/python3
BUILD ?= build
ASAN_BUILD ?= build-asan
# The newest torch served with its torchvision, and the GPU machine's.
TORCH2_VERSIONS ?= 2.14 2.11
JOBS ?= $(shell nproc)
CMAKE ?= cmake
CTEST_ARGS ?=

.PHONY: all deps configure build test test-core test-asan test-torch2 demo bench bench-check clean format

all: build

deps:
	@tools/install-deps.sh

configure: deps
	@$(CMAKE) -S . -B $(BUILD) -G Ninja -DCHORUS_PYTHON=$(PYTHON) >/dev/null

build: configure
	@$(CMAKE) --build $(BUILD) -j $(JOBS)

test: build test-asan test-torch2
	cd $(BUILD) && ctest --output-on-failure -j 1 $(CTEST_ARGS)

# torch 2.x (pip wheels): PyObject routing, per-interpreter storages, the
# copies' static registrations. The interpreter core and its tests for now.
test-torch2: deps
	@for version in $(TORCH2_VERSIONS); do \
	  python=$$(tools/make-venv.sh tools/requirements/torch-$$version.txt) && \
	  $(CMAKE) -S . -B build-torch$$version -G Ninja -DCHORUS_PYTHON=$$python >/dev/null && \
	  $(CMAKE) --build build-torch$$version -j $(JOBS) --target libcache_test interpreter_test && \
	  (cd build-torch$$version && \
	   ctest --output-on-failure -j 1 -R '^(ElfEditor|LibraryCache|SlotSoname|Interpreter)') || exit 1; \
	done

# The torch-free core (Status, files, ELF edits, library cache) under
# AddressSanitizer, LeakSanitizer and UBSan, built with clang so that the
# thread-safety annotations are checked too.
test-asan: configure
	@$(CMAKE) -S . -B $(ASAN_BUILD) -G Ninja -DCHORUS_CORE_ONLY=ON \
	  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
	  -DCHORUS_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug >/dev/null
	@$(CMAKE) --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 \
	  ctest --output-on-failure -L core
	@for f in interpreter/src/watchdog.cc interpreter/src/interpreter_loader.cc; do \
	  clang++ -std=c++17 -fsyntax-only -Wthread-safety -Werror=thread-safety -I. \
	    -Icommon/include -Iinterpreter/include -I$(BUILD)/generated \
	    -isystem /usr/include/torch/csrc/api/include $$f || exit 1; \
	done

demo: build
	@CHORUS_PYTHON=$(PYTHON) tools/demo.sh $(BUILD)

SUITE = PYTHONPATH=$(BUILD)/share/chorus/python $(PYTHON) tests/bench/suite

bench: build
	@$(SUITE)/suite.py --bin $(BUILD)/bin --out $(BUILD)/bench

bench-check: bench
	@$(SUITE)/check.py $(BUILD)/bench/suite.json tests/bench/suite/baseline.json

bench-%: build
	@$(BUILD)/bin/bench_$* --out $(BUILD)/bench/$*.json

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-torch2.*
