# The two commands of the README. Each does all set-up on a fresh machine that has python3 (>= 3.10),
# make and the package registry: it creates .venv when missing and (re)installs the project when
# pyproject.toml or setup.py changed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kfp-spot-installed

.PHONY: demo test lint typecheck format compile image test-images container-engine clean

# podman settings this machine needs (cgroupfs, runc, no ulimits); yours win when you set it.
CONTAINERS_CONF ?= $(CURDIR)/tools/containers.conf
export CONTAINERS_CONF

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --quiet -e '.[dev]'  # -qq: no build-backend chatter; errors still show
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kfp-spot run

# The container tests run the components' compiled commands inside the image: build it first (or
# reuse it: the build is skipped when nothing it is made of changed).
# pytest runs in PYTEST_WORKERS processes (pytest-xdist): most tests wait on subprocesses, the
# emulator or I/O, so more workers than cores pays. Each worker has its own session and module
# fixtures; what is expensive to make is made once per run under a file lock (tests/shared.py), and
# --dist loadgroup keeps the tests sharing a module fixture on one worker (tests/conftest.py);
# --durations lists the slowest tests, where the suite's time goes.
# The suite starts about a thousand Python processes that import this checkout's modules. Where
# PYTHONDONTWRITEBYTECODE is set (CI machines, some containers) none of them writes its bytecode,
# so each compiled them again: compileall writes it once, first (Python checks it against the source).
# Likewise every pytest worker rewrote the asserts of every test module (about 9 of its 15 CPU-s
# of collection): one collection with bytecode writing on caches them for all workers, run beside
# mypy, which uses one core.
PYTEST_WORKERS ?= 4
test: $(STAMP) test-images
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m compileall -q -j 0 kfp_spot pipelines components examples tests
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest --collect-only -q -p no:cacheprovider \
	  >/dev/null 2>&1 & warm=$$!; $(BIN)/mypy; typed=$$?; wait $$warm; exit $$typed
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=20

lint: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: $(STAMP)
	$(BIN)/mypy

compile: $(STAMP)
	$(BIN)/kfp-spot compile

# The runtime image (kfp_spot.RUNTIME_IMAGE) from this checkout, with podman or docker; docs/image.md.
image: $(STAMP) container-engine
	$(BIN)/kfp-spot image build

# The runtime image plus the example trainer's dependencies, for the container tests.
test-images: $(STAMP) container-engine
	$(BIN)/kfp-spot image build --examples

# A working docker engine, or podman (installed from Debian when missing: root, as on CI).
container-engine:
	@if ! { command -v podman >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1; } \
	    && ! docker info >/dev/null 2>&1; then \
	  echo "make: installing podman, runc and debootstrap with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    podman runc debootstrap >/dev/null; \
	fi

clean:
	rm -rf $(VENV) build *.egg-info local_outputs
