# A fresh machine needs only python3 (>= 3.11), npm and this Makefile.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo crds clean gpu-bundle gpu-check

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

.tools/bin/helm: .ci/install-tools
	bash .ci/install-tools

# The test command README.md names; .ci/run calls it.
test: $(STAMP) .tools/bin/helm
	PATH="$(CURDIR)/.tools/bin:$$PATH" $(BIN)/pytest -q -rs

# The main job: the example CRs served by a real local tritonserver, one sample request per model.
demo: $(STAMP)
	$(BIN)/triton-operator validate examples
	$(BIN)/triton-operator local examples --once

# On a machine with network: what the GPU check needs on a GPU host without one, in .gpu-bundle/.
gpu-bundle: $(STAMP)
	bash gpu/bundle.sh

# On a GPU host (Python 3.12), with .gpu-bundle/ copied beside this Makefile.
gpu-check:
	bash gpu/check.sh

crds: $(STAMP)
	$(BIN)/triton-operator crds

clean:
	rm -rf build .pytest_cache
