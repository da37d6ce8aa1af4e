# kernelcast: the two set-up commands are `make demo` (main job) and `make test` (test suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kernelcast-installed

.PHONY: demo test unit lint typecheck opencl ptx clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# A working OpenCL device: the PoCL wheel's LLVM may not know a new CPU ("unknown target CPU
# 'generic'") or may abort on vector math builtins (LLVM 14 on an AVX-512 host); then, where apt and
# root are available, Debian's PoCL is installed beside it and the check is repeated.
opencl: $(STAMP)
	@$(BIN)/python -m kernelcast.opencl_check --strict || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's pocl-opencl-icd" && \
	    { apt-get install -y -qq pocl-opencl-icd >/dev/null 2>&1 || \
	      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq pocl-opencl-icd >/dev/null 2>&1; } || \
	      echo "could not install pocl-opencl-icd"; }; \
	  fi; \
	  $(BIN)/python -m kernelcast.opencl_check || \
	    { echo "no OpenCL device can build kernels; install an OpenCL driver (e.g. pocl-opencl-icd)"; exit 1; }; }

# OpenCL C -> PTX for the static PTX features, and the AMD register counts of AMD profiles: a clang
# with the NVPTX back-end, 16 or newer (MIN_CLANG_MAJOR: an older one's AMD register counts differ);
# where there is none and apt and root are available, Debian's clang-16 is installed (without any
# clang the PTX features are left out and their tests skip)
ptx: $(STAMP)
	@$(BIN)/python -c "import sys; from kernelcast.models.static.ptx import MIN_CLANG_MAJOR, clang_major, find_clang; c = find_clang(); sys.exit(c is None or (clang_major(c) or 0) < MIN_CLANG_MAJOR)" || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's clang-16 (OpenCL C -> PTX, AMD register counts)" && \
	    { apt-get install -y -qq clang-16 >/dev/null 2>&1 || \
	      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq clang-16 >/dev/null 2>&1; } || \
	      echo "could not install clang-16: the clang found, if any, is used"; }; \
	  else echo "no clang 16 or newer with the NVPTX back-end: the clang found, if any, is used"; fi; }

demo: opencl ptx
	$(BIN)/kernelcast demo

# the type check and the unit tests run side by side (mypy prints only at its end); either failing fails.
# pytest runs on TEST_WORKERS processes (pytest-xdist), each test file on one of them.
TEST_WORKERS ?= 2

test: opencl ptx
	@$(MAKE) --no-print-directory -j2 typecheck unit

unit: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# the typed seams: hardware, dataset, predictor interface and what every stage shares (and what they import)
typecheck: $(STAMP)
	$(BIN)/mypy instrument/ datagen/dataset.py models/base.py kernelcast/

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info
