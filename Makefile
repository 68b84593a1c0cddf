# A fresh machine needs only python3 (>= 3.11), npm and this Makefile.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo crds clean

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

crds: $(STAMP)
	$(BIN)/triton-operator crds

clean:
	rm -rf build .pytest_cache
