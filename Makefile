# A fresh machine needs only python3 (>= 3.11), npm and this Makefile.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# What the demo needs alone: the package and the wheel's tritonserver, not the test toolchain.
DEMO_STAMP := $(VENV)/.installed-local

.PHONY: test lint test-py312 demo crds clean gpu-bundle gpu-check cluster-build cluster cluster-stop

# Both stamps share one venv: the full install holds the demo's too, so it marks both.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@ $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[local]"
	touch $@

# The tests that run Triton's python backend run on Python 3.12 too: the wheel's stub for it is another build.
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12 2>/dev/null))
VENV312 := .venv312
PY312_TESTS := tests/local/test_local_mode.py tests/local/test_local_samples.py tests/local/test_local_gpus.py \
	tests/triton/test_sync_triton.py tests/client/test_client_pool.py tests/client/test_cuda_regions.py \
	tests/render/test_server_args_on_triton.py

$(VENV312)/.installed: pyproject.toml
	$(PYTHON312) -m venv $(VENV312)
	$(VENV312)/bin/pip install --quiet --upgrade pip
	$(VENV312)/bin/pip install --quiet -e ".[test]"
	touch $@

.tools/bin/helm: .ci/install-tools
	bash .ci/install-tools

# The test command README.md names; .ci/run calls it.
test: $(STAMP) .tools/bin/helm lint cluster-build
	PATH="$(CURDIR)/.tools/bin:$$PATH" $(BIN)/pytest -q -rs
	$(MAKE) test-py312

# The style and type rules pyproject.toml's [tool.ruff] and [tool.mypy] set, checked rather than remembered;
# examples/ too, whose clients users copy.
LINTED := operator tests bench gpu examples
lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

test-py312:
	@if [ -z "$(PYTHON312)" ]; then echo "NOT RUN: the Python 3.12 tests need a python3.12 (e.g. pyenv install 3.12)"; \
	else $(MAKE) $(VENV312)/.installed && $(VENV312)/bin/pytest -q -rs $(PY312_TESTS); fi

# The main job: the example CRs served by a real local tritonserver, one sample request per model.
demo: $(DEMO_STAMP)
	$(BIN)/triton-operator validate examples
	$(BIN)/triton-operator local examples --once

# On a machine with network: what the GPU check needs on a GPU host without one, in .gpu-bundle/.
gpu-bundle: $(STAMP)
	bash gpu/bundle.sh

# On a GPU host (Python 3.12), with .gpu-bundle/ copied beside this Makefile.
gpu-check:
	bash gpu/check.sh

# A real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) built from source
# into .cluster/bin; the e2e tier runs on it, and says NOT RUN where Go is missing.
cluster-build:
	@if command -v go >/dev/null 2>&1; then bash cluster/build.sh; \
	else echo "NOT RUN: no Go on this machine: the control plane is not built, so the e2e tier does not run"; fi

# Start it in .cluster/run and return once every component answers (.cluster/kubeconfig); cluster-stop ends it.
cluster: $(STAMP)
	bash cluster/build.sh
	$(BIN)/python -m tests.support.controlplane up

cluster-stop: $(STAMP)
	$(BIN)/python -m tests.support.controlplane down

crds: $(STAMP)
	$(BIN)/triton-operator crds

clean:
	rm -rf build .pytest_cache
