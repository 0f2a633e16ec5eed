# attn — a thin layer over CMake/CTest.
#   make demo    train the default model (reverse digits) and write its report
#   make test    install dependencies, build, run every test
#   make deps    install the Debian packages attn needs (apt-get; run as root)
#   make build   configure and build in Release under build/
#   make bench   benchmarks side by side with PyTorch (bench/RESULTS.md)
BUILD    ?= build
JOBS     ?= $(shell nproc)
# Warnings are errors in CI (CI=true) and may be forced with WERROR=ON.
WERROR   ?= $(if $(CI),ON,OFF)

DEB_PACKAGES := build-essential cmake pkg-config libopenblas-dev libopenblas0-openmp \
  nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev \
  python3 python3-torch python3-numpy \
  libsentencepiece-dev sentencepiece python3-nltk libicu-dev \
  openmpi-bin libopenmpi-dev

.PHONY: all deps build test demo bench clean

all: build

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "attn: installing$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends $$missing; \
	else echo "attn: all Debian packages present"; fi
	@# node and npm run the GPT-2 tokenizer check (tests/npm). Debian's nodejs and npm packages
	@# unless a node with npm is already installed (a nodesource nodejs bundles npm and conflicts
	@# with Debian's npm package).
	@if command -v node >/dev/null && command -v npm >/dev/null; then echo "attn: node and npm present"; \
	else SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends nodejs npm; fi

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DATTN_WERROR=$(WERROR)
	cmake --build $(BUILD) -j $(JOBS)

test: deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The seed's check that training works: reverse 8 random digits with the default model and
# recipe (attn train --help), then report.html and a few translations of random inputs.
DEMO_OUT ?= runs/reverse
demo: deps build
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
	rm -rf $(BUILD)
