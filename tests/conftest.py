"""Shared fixtures: a local GCS emulator (gcp-storage-emulator) on a free loopback port, one
package-environment cache and one JAX compilation cache for the run, and kfp.local passing GCPC's
pipeline placeholders through (as ``kfp-spot run`` has it).

The suite runs under pytest-xdist (``make test``): every worker is a process of its own, so a
fixture binds port 0 (never a port chosen beforehand), writes below ``tmp_path`` or a directory of
:mod:`tests.shared`, and restores what it sets in ``os.environ``. A module-scoped fixture is made
once per worker that runs one of its tests, so the tests that share one are kept on one worker
(``--dist loadgroup``, see ``pytest_collection_modifyitems``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.shared import once_per_run, run_dir

TEST_BUCKET = "kfp-spot-test"


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pytest_configure(config):
    """gcsfs reads GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT once, when it is first imported.

    Left unset, its hierarchical-namespace extension asks the bucket's storage layout first, which
    the GCS emulator never answers (the call is retried for minutes). Set before any test module
    imports gcsfs at collection, in every xdist worker.
    """
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    _hypothesis_without_timing()
    _fewer_full_collections()


def _fewer_full_collections() -> None:
    """A worker imports a great deal (the Vertex AI SDK, GAPIC types, KFP): Python's cyclic GC ran
    a full collection of that whole heap 28-32 times per worker, 10-12 s of each worker's 63-86 s
    of CPU (gc.callbacks over a whole run, 55 s of the five workers'). Full collections after 1000
    middle-generation ones instead of 10: 10 in a run in all, 17 s of GC; the workers' peak RSS
    went from 537-820 MB to 579-820 MB. Cycles are still collected, and a test's own
    ``gc.collect()`` is unchanged.
    """
    import gc

    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 1000)


def _hypothesis_without_timing() -> None:
    """Hypothesis fails an example that takes over 200 ms, and a test whose data comes slowly: on a
    loaded machine (CI's two cores under five workers) both happen to correct code. The suite's
    profile drops those two timing checks, so a property test fails only on what it asserts.

    Loaded before the test modules are imported: a test's own ``@settings`` start from it.
    """
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "kfp-spot-suite", deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.load_profile("kfp-spot-suite")


def _uses_module_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses (directly or through other fixtures) a module-scoped fixture."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        defs[-1].scope == "module"
        for name in info.names_closure
        if (defs := info.name2fixturedefs.get(name))
    )


def _join_group(item: pytest.Item, group: str) -> None:
    """Put ``item`` in the xdist group ``group`` (``--dist loadgroup``).

    xdist reads a test's group from an ``@group`` suffix of its node ID. Its own hook appends it
    from ``xdist_group`` marks by setting ``Node._nodeid``, which pytest 9 no longer reads (the ID
    lives in ``Node._id``), so the tests were silently spread over all workers: the suffix is
    written here, where pytest keeps it.
    """
    item.add_marker(pytest.mark.xdist_group(group))
    nodeid = f"{item.nodeid}@{group}"
    if hasattr(item, "_id"):  # pytest >= 9
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(nodeid)
    else:
        item._nodeid = nodeid


def _by_folder_in_turn(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` module by module, each folder's modules spread evenly over the whole run.

    The tests of a folder tend to spend their time alike: the emulator's wait on jobs' timers and
    grace periods, the packaging ones build on the CPU. Run in collection order, every worker
    reached tests/emulator at about the same time and both cores sat 20-50% idle for half a
    minute. Here the next module always comes from the folder least far through its tests, so
    waiting tests run beside busy ones. A module's tests stay together and in their order.
    """

    def module_of(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0].split("@")[0]

    folders: dict[str, list[list[pytest.Item]]] = {}
    for item in items:
        module = module_of(item)
        modules = folders.setdefault(module.rpartition("/")[0], [])
        if not modules or module_of(modules[-1][0]) != module:
            modules.append([])
        modules[-1].append(item)
    totals = {folder: sum(map(len, modules)) for folder, modules in folders.items()}
    taken = dict.fromkeys(folders, 0)
    ordered: list[pytest.Item] = []
    while len(ordered) < len(items):
        folder = min((f for f in folders if folders[f]), key=lambda f: taken[f] / totals[f])
        module = folders[folder].pop(0)
        ordered.extend(module)
        taken[folder] += len(module)
    return ordered


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Schedule for xdist: slow tests first, and the tests sharing a module fixture on one worker.

    A module-scoped fixture (a whole pipeline run, a trained example, a built package) is made
    once per worker that runs one of its tests; spread over the workers by ``--dist load`` it was
    made up to once on each. Under ``--dist loadgroup`` (``make test``) a module's tests that use
    one form a group, which runs on one worker, and xdist hands out the groups with the most tests
    first. The tests marked ``slow`` come first among the rest, so the longest ones do not start
    last while the other workers sit idle; the rest take turns by folder
    (:func:`_by_folder_in_turn`). Every worker orders the same collection the same way; without
    xdist the order is the only change. Runs last: after the deselection hooks.
    """
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    rest = [item for item in items if item.get_closest_marker("slow") is None]
    items[:] = slow + _by_folder_in_turn(rest)
    if config.getoption("loadgroup", default=False):  # set in xdist's workers only
        for item in items:
            if _uses_module_fixture(item) and "@" not in item.nodeid:
                _join_group(item, item.nodeid.split("::")[0])


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_go_with_the_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """This process's and its children's temporary files go below pytest's own temp dir.

    kfp.local makes a workspace directory at each ``local.init`` and KFP's component command a
    ``mktemp -d`` at each task run outside ``kfp-spot run``; neither is ever removed, so each run
    of the suite left about fifty in /tmp. pytest removes its own old temp dirs.
    """
    import tempfile

    scratch = str(tmp_path_factory.mktemp("tmp"))
    previous, before = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = scratch, scratch
    try:
        yield
    finally:
        tempfile.tempdir = previous
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before


@pytest.fixture(scope="session", autouse=True)
def _gcp_placeholders_as_text():
    """kfp.local cannot parse the launch component's GCPC placeholder defaults without it.

    See kfp_spot.pipelines.local_placeholders; tests/jobs/test_pipeline_placeholders.py shows
    kfp.local failing without it.
    """
    from kfp_spot.pipelines.local_placeholders import gcp_placeholders_as_text

    with gcp_placeholders_as_text():
        yield


@pytest.fixture(scope="session")
def env_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One package-environment cache for the run, shared by every xdist worker.

    ``kfp_spot.envcache`` locks each environment while it builds it, so an environment two
    workers need is installed once and the second waits for it.
    """
    return run_dir(tmp_path_factory, "envcache")


@pytest.fixture(scope="session", autouse=True)
def _default_env_cache(env_cache: Path) -> Iterator[None]:
    """Code that falls back on ``envcache.default_cache_dir()`` (an Emulator given no
    ``env_cache_dir``, a component's evaluation) uses the run's cache, not the user's
    ``~/.cache/kfp-spot``: the suite starts from nothing, as on a fresh machine."""
    saved = os.environ.get("KFP_SPOT_CACHE_DIR")
    os.environ["KFP_SPOT_CACHE_DIR"] = str(env_cache)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("KFP_SPOT_CACHE_DIR", None)
        else:
            os.environ["KFP_SPOT_CACHE_DIR"] = saved


@pytest.fixture(scope="session", autouse=True)
def _shared_jax_compilation_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every JAX process of the run (the Keras example's attempts, the jobs the emulator starts,
    the tests' own Keras calls) reads and writes one persistent XLA compilation cache, so a
    training step is compiled once per run instead of once per attempt (seconds of CPU each).

    Everything is cached (no minimum compile time or entry size). No size limit: JAX needs the
    ``filelock`` package for one, which a job's environment (the executor image's libraries and
    the package's own, as on a VM) does not hold, so with a limit every emulator job and every
    evaluation warned and compiled all anew. Unlocked, a process may read an entry another is
    still writing: the truncated zlib stream fails to decompress, JAX warns and compiles it
    itself, the same executable. A cached executable is the one XLA compiled for the same
    program, so the weights come out bit for bit the same: the Keras tests' bitwise checks
    compare the run that compiled first with runs that read its entries.
    ``JAX_PLATFORMS=cpu``: this machine has no accelerator, and JAX stops probing for a TPU
    first (about a second of wall time per process). Test-only: the product sets none of these.
    """
    values = {
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": str(run_dir(tmp_path_factory, "jax-compilation-cache")),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in values.items():
            patch.setenv(name, value)
        yield


@pytest.fixture(scope="session", autouse=True)
def _openmp_threads_sleep_while_they_wait() -> Iterator[None]:
    """OpenMP threads (XGBoost's) sleep between parallel regions instead of spinning.

    The suite runs more workers than the machine has cores, and a spinning thread burns the
    core that another test's process is waiting for: an XGBoost example run paced at 0.1 s a
    round took 6.0 CPU-s beside two busy processes, 2.4 with this (2.5 on an idle machine). It
    changes when a thread waits, not what it computes. Test-only: on a training VM the trainer
    has the cores to itself, where spinning is OpenMP's right default.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_WAIT_POLICY", "passive")
        yield


@pytest.fixture(scope="session", autouse=True)
def _container_runtime_probed_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The container runtime is probed once per run, not by each of the run's ~230 emulators.

    Each emulator runs ``docker info``/``podman info`` as it starts (podman's asks dpkg about
    its parts: ~0.4 CPU-s each, a tenth of the suite's CPU). The first worker probes as an
    emulator would and every emulator of the run (in-process or ``kfp-spot emulator``) is told
    the answer through ``KFP_SPOT_CONTAINER_RUNTIME``: the same runtime, or ``none``.
    A variable already set (by whoever runs the suite) is left as it is.
    """
    from kfp_spot.emulator import containers

    if os.environ.get(containers.ENV):
        yield
        return
    answer = once_per_run(
        tmp_path_factory, "container-runtime", lambda _: containers.container_runtime()
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(containers.ENV, answer or "none")
        yield


@pytest.fixture(scope="session")
def gcs_emulator():
    """A GCS emulator with bucket ``kfp-spot-test``; STORAGE_EMULATOR_HOST points at it.

    Yields the emulator's base URL. gcsfs and google-cloud-storage both honour the variable.
    """
    from gcp_storage_emulator.server import create_server

    server = create_server("127.0.0.1", 0, in_memory=True, default_bucket=TEST_BUCKET)
    server.start()
    port = server._api._httpd.server_address[1]  # port 0: the OS chose it, no other worker can
    saved = {k: os.environ.get(k) for k in ("STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT")}
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    os.environ.setdefault("GOOGLE_CLOUD_PROJECT", "kfp-spot-test")
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def gs_bucket(gcs_emulator: str) -> str:
    """``gs://`` URI of the GCS emulator's default bucket.

    One GCS emulator per worker process: ``STORAGE_EMULATOR_HOST`` is process-wide, so a second
    one would repoint gcsfs under the tests that use the first (tests/test_suite_fixtures.py).
    """
    return f"gs://{TEST_BUCKET}"


@pytest.fixture
def no_google_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Google login on this machine: ADC points nowhere, no gcloud config, no metadata server."""
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "nowhere.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("NO_GCE_CHECK", "True")


@pytest.fixture
def sign_in_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_google_login: None
) -> Iterator[None]:
    """A login on file (a service account key) whose token service does not answer: offline."""
    import json

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    with socket.socket() as closed:  # bound, never listening: a connection is refused at once
        closed.bind(("127.0.0.1", 0))
        info = {
            "type": "service_account",
            "project_id": "my-proj",
            "private_key_id": "1",
            "private_key": pem,
            "client_email": "runner@my-proj.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": f"http://127.0.0.1:{closed.getsockname()[1]}/token",
        }
        key_file = tmp_path / "key.json"
        key_file.write_text(json.dumps(info))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
        yield
