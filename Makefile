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
  python3 python3-torch python3-numpy

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

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DATTN_WERROR=$(WERROR)
	cmake --build $(BUILD) -j $(JOBS)

test: deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
