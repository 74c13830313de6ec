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

# The demo needs the project and the example trainer's dependencies only (no framework, no test
# tools): less to install, and nothing a laptop's platform may lack a wheel for. A venv that
# `make test` set up already holds them.
DEMO_STAMP := $(VENV)/.kfp-spot-demo-installed
$(DEMO_STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --quiet -e '.[examples]'
	touch $(DEMO_STAMP)

demo: $(if $(wildcard $(STAMP)),$(STAMP),$(DEMO_STAMP))
	$(BIN)/kfp-spot run

# The container tests run the components' compiled commands inside the image: build it first (or
# reuse it: the build is skipped when nothing it is made of changed).
# pytest runs in PYTEST_WORKERS processes (pytest-xdist): most tests wait on subprocesses, the
# emulator or I/O, so more workers than cores pays (on two cores a smaller suite took 295 s of
# pytest with 4 workers, 260 s with 5 and 247 s with 6; 5 keeps room for a machine busy with
# other work). With 2 859 tests, 5 workers took 340-378 s with both cores ~95% busy throughout:
# only less CPU shortens it now, not more workers (3 195 tests took 255-279 s once tests sharing
# one expensive run were given one, about 520 s of CPU against 750; 3 389 tests 265-281 s). Each worker has its own session and module
# fixtures; what is expensive to make is made once per run under a file lock (tests/shared.py), and
# --dist loadgroup keeps the tests sharing a module fixture on one worker (tests/conftest.py),
# whose folders take turns, so the emulator's tests (waiting on jobs' timers) run beside busy
# ones instead of all at once (idle CPU over a run: 19-24 core-seconds before, 13-17 after);
# --durations lists the slowest tests, where the suite's time goes.
# The suite starts about a thousand Python processes that import this checkout's modules. Where
# PYTHONDONTWRITEBYTECODE is set (CI machines, some containers) none of them writes its bytecode,
# so each compiled them again: compileall writes it once, first (Python checks it against the source).
# Likewise every pytest worker rewrote the asserts of every test module (about 9 of its 15 CPU-s
# of collection): one collection with bytecode writing on caches them for all workers, run beside
# mypy, which uses one core.
PYTEST_WORKERS ?= 5
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

# The runtime image plus the example trainer's dependencies, for the container tests. Its base is
# debootstrapped from Debian on an x86_64 machine with debootstrap (CI, where no registry of base
# images is reachable); elsewhere (a Mac, an arm64 machine) it is python:3.11-slim, which the engine
# pulls for the image's linux/amd64 platform.
test-images: $(STAMP) container-engine
	$(BIN)/kfp-spot image build --examples $$(if command -v debootstrap >/dev/null 2>&1 \
	  && [ "$$(uname -m)" = x86_64 ]; then :; else echo --base-image python:3.11-slim; fi)

# A working docker engine, or podman (installed from Debian when missing: root, as on CI). Where
# there is neither and no apt-get (a Mac), it says what to install instead of failing on apt-get.
container-engine:
	@if command -v podman >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1; then :; \
	elif docker info >/dev/null 2>&1; then :; \
	elif command -v podman >/dev/null 2>&1 && ! command -v apt-get >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
	  echo "make: installing podman, runc and debootstrap with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    podman runc debootstrap >/dev/null; \
	else \
	  echo "make: the container tests build the runtime image with docker or podman, and neither" \
	    "is running here: start Docker Desktop (docker info must answer), or install podman" \
	    "(brew install podman && podman machine init && podman machine start)" >&2; \
	  exit 1; \
	fi

clean:
	rm -rf $(VENV) build *.egg-info local_outputs
