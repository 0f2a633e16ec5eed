# attn — a thin layer over CMake/CTest.
#   make demo    install the build dependencies only, build attn, train the default model
#   make test    install every dependency, build, run every test, then the sanitizer step
#                below (make sanitize); SANITIZE=0 leaves that step out
#   make deps    install every Debian package attn's tests and benchmarks need (apt-get; root)
#   make deps-demo  install only what building and running attn needs
#   make build   configure and build in Release under build/
#   make bench   benchmarks side by side with PyTorch (bench/RESULTS.md)
#   make sanitize  the unit, property and e2e tests under ASan + UBSan, and every fuzz target's
#                corpus replayed and fuzzed for 60 s (build-san/, clang; docs/fuzzing.md)
#   make fuzz    the long fuzz campaign: each target for FUZZ_RUNS executions or FUZZ_SECONDS,
#                whichever comes first, FUZZ_PARALLEL at once (docs/fuzzing.md)
BUILD    ?= build
JOBS     ?= $(shell nproc)
# Warnings are errors in CI (CI=true) and may be forced with WERROR=ON.
WERROR   ?= $(if $(CI),ON,OFF)

# Building and running attn: the compiler, CMake, OpenBLAS, JSON, CLI11, SentencePiece, ICU,
# cpp-httplib (attn serve).
# MPI is optional (CMake uses it when it is installed; the demo trains in one process).
DEMO_PACKAGES := build-essential cmake pkg-config libopenblas-dev libopenblas0-openmp \
  nlohmann-json3-dev libcli11-dev libsentencepiece-dev libicu-dev libcpp-httplib-dev
# The tests and benchmarks add GoogleTest, Google Benchmark, PyTorch, NLTK, the SentencePiece
# tools, MPI, headless Chromium with Selenium (the explorer's browser test) (and node with npm,
# below), and clang with libFuzzer and its sanitizer runtimes
# (and LLVM's OpenMP) for the sanitizer build and the fuzz targets.
TEST_PACKAGES := $(DEMO_PACKAGES) libgtest-dev libgmock-dev libbenchmark-dev \
  python3 python3-torch python3-numpy sentencepiece python3-nltk \
  openmpi-bin libopenmpi-dev python3-requests curl chromium chromium-driver python3-selenium \
  clang-14 libfuzzer-14-dev libclang-rt-14-dev libomp-14-dev

# The sanitizer build (cmake/sanitizers.cmake): its own folder, clang, ASan + UBSan, the fuzz
# targets. SAN_LABELS: the ctest labels run under the sanitizers; FUZZ_CI_SECONDS: how long
# make test fuzzes each target; FUZZ_SECONDS: how long make fuzz fuzzes each at most,
# FUZZ_RUNS: the executions it stops at (0: no cap), FUZZ_PARALLEL: how many targets it fuzzes
# at once (one core each).
SAN_BUILD       ?= build-san
SAN_CXX         ?= clang++-14
SAN_LABELS      ?= unit|property|e2e
FUZZ_CI_SECONDS ?= 60
FUZZ_SECONDS    ?= 600
FUZZ_RUNS       ?= 1000000
FUZZ_PARALLEL   ?= 1
# make test runs the sanitizer step after the normal tests; SANITIZE=0 leaves it out.
SANITIZE        ?= 1

.PHONY: all deps deps-demo build test demo bench clean san-build sanitize fuzz

all: build

# apt-get install of those of $(1) not installed yet.
define apt_install
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "attn: installing$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends $$missing; \
	else echo "attn: all Debian packages present"; fi
endef

deps-demo:
	$(call apt_install,$(DEMO_PACKAGES))

deps:
	$(call apt_install,$(TEST_PACKAGES))
	@# node and npm run the GPT-2 tokenizer check (tests/npm). Debian's nodejs and npm packages
	@# unless a node with npm is already installed (a nodesource nodejs bundles npm and conflicts
	@# with Debian's npm package).
	@if command -v node >/dev/null && command -v npm >/dev/null; then echo "attn: node and npm present"; \
	else SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends nodejs npm; fi

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DATTN_WERROR=$(WERROR) -DATTN_BUILD_TESTS=ON
	cmake --build $(BUILD) -j $(JOBS)

# The sanitizer step runs after the normal tests, never beside them (both take both cores).
test: deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@if [ "$(SANITIZE)" != 0 ]; then $(MAKE) --no-print-directory sanitize; \
	else echo "attn: the sanitizer step left out (SANITIZE=0; make sanitize runs it)"; fi

# Configures and builds the sanitizer tree: the CLI, the unit, property and e2e tests, the fuzz
# targets (nothing else: the other labels do not run there).
san-build:
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=$(SAN_CXX) \
	  -DATTN_WERROR=$(WERROR) -DATTN_BUILD_TESTS=ON -DATTN_FUZZ=ON -DATTN_FUZZ_SECONDS=$(FUZZ_CI_SECONDS)
	cmake --build $(SAN_BUILD) -j $(JOBS) --target attn_cli attn_unit_tests attn_property_tests \
	  attn_e2e_tests attn_fuzz_targets

# On its own, never beside the normal tests: the tests under ASan + UBSan (a report of any
# process, a child `attn` included, fails the step: tests/sanitize.sh), then every fuzz target's corpus replayed and fuzzed for FUZZ_CI_SECONDS.
sanitize: deps san-build
	bash tests/sanitize.sh $(SAN_BUILD) '$(SAN_LABELS)' $(JOBS)
	cd $(SAN_BUILD) && ctest --output-on-failure -j $(JOBS) -L fuzz

fuzz: deps
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=$(SAN_CXX) \
	  -DATTN_WERROR=$(WERROR) -DATTN_BUILD_TESTS=ON -DATTN_FUZZ=ON -DATTN_FUZZ_SECONDS=$(FUZZ_CI_SECONDS)
	cmake --build $(SAN_BUILD) -j $(JOBS) --target attn_fuzz_targets
	FUZZ_RUNS=$(FUZZ_RUNS) FUZZ_PARALLEL=$(FUZZ_PARALLEL) bash tests/fuzz/campaign.sh $(SAN_BUILD) $(FUZZ_SECONDS)

# The seed's check that training works: reverse 8 random digits with the default model and
# recipe (attn train --help), then report.html and a few translations of random inputs.
# The demo builds the executable alone; its tests are configured too when GoogleTest is
# already installed, so that a later `make test` in the same build folder rebuilds nothing.
DEMO_OUT ?= runs/reverse
DEMO_TESTS = $(shell dpkg-query -W -f='$${Status}' libgtest-dev 2>/dev/null | grep -q "install ok installed" && echo ON || echo OFF)
demo: deps-demo
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DATTN_WERROR=$(WERROR) -DATTN_BUILD_TESTS=$(DEMO_TESTS)
	cmake --build $(BUILD) -j $(JOBS) --target attn_cli
	$(BUILD)/attn train --task reverse --out $(DEMO_OUT) --force

# Benchmarks: our Google Benchmark binaries and `attn train` against PyTorch on the same
# shapes and thread count (bench/compare.py writes bench/RESULTS.md). BENCH_ARGS=--quick
# gives a short run. The bench targets are outside `all`, so `make test` never builds them.
BENCH_THREADS ?= $(shell nproc)
BENCH_ARGS    ?=
BENCH_PYTHON  ?= /usr/bin/python3

bench: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DATTN_WERROR=$(WERROR)
	cmake --build $(BUILD) -j $(JOBS) --target attn_cli attn_benchmarks
	$(BENCH_PYTHON) bench/compare.py --build $(BUILD) --threads $(BENCH_THREADS) --python $(BENCH_PYTHON) $(BENCH_ARGS)

clean:
	rm -rf $(BUILD) $(SAN_BUILD)
