"""A build sees what pip on the training VM gives it: the declared build requirements, nothing else
installed here; what the project does not declare neither helps nor shapes its archives."""

import logging
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from kfp_spot.packaging import backend
from kfp_spot.packaging.build import run_build
from kfp_spot.packaging.errors import BuildError
from tests.packaging.probe_plugin import PLUGIN, install_plugin, legacy_project


def _project(root: Path, requires: list[str], setup_py: str = "") -> Path:
    root.mkdir(parents=True)
    quoted = ", ".join(f'"{r}"' for r in requires)
    (root / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
            [build-system]
            requires = [{quoted}]
            build-backend = "setuptools.build_meta"

            [project]
            name = "probed"
            version = "1.0"
            """)
    )
    (root / "probed.py").write_text("VALUE = 1\n")
    if setup_py:
        (root / "setup.py").write_text(setup_py)
    return root


def _sdist_names(built) -> set[str]:
    with tarfile.open(built.sdist) as archive:
        return {Path(name).name for name in archive.getnames()}


def test_an_installed_plugin_shapes_the_archives_only_when_declared(tmp_path, monkeypatch):
    site = install_plugin(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))  # installed, as this interpreter sees it
    monkeypatch.setenv("PYTHONPATH", str(site))  # and as every process started here would
    undeclared = run_build(_project(tmp_path / "a", ["setuptools>=61"]), tmp_path / "out-a")
    assert "probe.txt" not in _sdist_names(undeclared)
    declared = run_build(_project(tmp_path / "b", ["setuptools>=61", PLUGIN]), tmp_path / "out-b")
    assert "probe.txt" in _sdist_names(declared)


def test_a_setup_py_importing_an_undeclared_module_fails_naming_it_and_the_fix(tmp_path):
    setup_py = "import yaml\nfrom setuptools import setup\nsetup()\n"
    with pytest.raises(BuildError) as raised:
        run_build(_project(tmp_path / "a", ["setuptools>=61"], setup_py), tmp_path / "out-a")
    message = str(raised.value)
    assert "No module named 'yaml'" in message
    assert "'yaml', which none of its build requirements (setuptools>=61)" in message
    assert "[build-system] requires" in message
    built = run_build(
        _project(tmp_path / "b", ["setuptools>=61", "PyYAML"], setup_py), tmp_path / "out-b"
    )
    assert built.wheel.name == "probed-1.0-py3-none-any.whl"


def test_a_backend_the_project_does_not_require_is_named_with_the_fix(tmp_path):
    with pytest.raises(BuildError) as raised:
        run_build(_project(tmp_path / "a", []), tmp_path / "out")
    message = str(raised.value)
    assert "Backend 'setuptools.build_meta' is not available" in message
    assert "not among the build requirements (none declared)" in message
    assert "[build-system] requires" in message


def test_what_the_backend_asks_for_at_build_time_is_there_as_pip_would_install_it(tmp_path):
    # setuptools asks for setup_requires through get_requires_for_build_*; pip installs them
    project = legacy_project(
        tmp_path / "legacy",
        "import importlib.util\n"
        "from setuptools import setup\n"
        "summary = 'unseen'\n"
        "if importlib.util.find_spec('yaml'):\n"
        "    import yaml\n"
        "    summary = yaml.safe_load('x: seen')['x']\n"
        "setup(name='probed', version='1.0', py_modules=['probed'], description=summary,\n"
        "      setup_requires=['PyYAML'])\n",
    )
    built = run_build(project, tmp_path / "out")
    with zipfile.ZipFile(built.wheel) as wheel:
        assert "Summary: seen" in wheel.read("probed-1.0.dist-info/METADATA").decode()


def test_a_requirement_without_a_record_of_its_files_builds_in_this_environment(
    tmp_path, monkeypatch, caplog
):
    site = install_plugin(tmp_path / "site", record=False)  # what was installed is unknown: no view
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    with caplog.at_level(logging.WARNING, logger="kfp_spot.packaging.backend"):
        built = run_build(_project(tmp_path / "a", ["setuptools>=61", PLUGIN]), tmp_path / "out")
    assert "probe.txt" in _sdist_names(built)
    assert (
        f"sees this whole environment, not only its build requirements (no RECORD of what {PLUGIN}"
        in caplog.text
    )
    assert "not by pip's build on the training VM" in caplog.text


def test_of_a_shared_namespace_the_build_sees_only_its_requirements_part(tmp_path):
    # protobuf installs into google/, as the Google Cloud libraries installed here do
    setup_py = (
        "import google.protobuf\nimport google.api_core\nfrom setuptools import setup\nsetup()\n"
    )
    with pytest.raises(BuildError, match=r"No module named 'google.api_core'"):
        run_build(
            _project(tmp_path / "a", ["setuptools>=61", "protobuf"], setup_py), tmp_path / "o"
        )
    declared = ["setuptools>=61", "protobuf", "google-api-core"]
    built = run_build(_project(tmp_path / "b", declared, setup_py), tmp_path / "out-b")
    assert built.wheel.name == "probed-1.0-py3-none-any.whl"


@pytest.mark.parametrize("module", ["google.protobuf", "kfp_spot"])
def test_what_this_environment_hooks_into_imports_is_not_there_either(tmp_path, module):
    # google: a namespace package a -nspkg.pth file imports at start-up; kfp_spot: installed here
    # in editable mode (an import hook on sys.meta_path) or as a package. pip on the VM has neither.
    setup_py = f"import {module}\nfrom setuptools import setup\nsetup()\n"
    with pytest.raises(BuildError, match=r"No module named '(google|kfp_spot)'"):
        run_build(_project(tmp_path / "a", ["setuptools>=61"], setup_py), tmp_path / "out")


def test_what_the_backend_asks_for_in_a_version_not_installed_here_builds_isolated(
    tmp_path, monkeypatch
):
    """pip on the VM installs a ``setup_requires`` the installed version does not satisfy; the
    build used to go on with the installed one. It now runs isolated, as for a declared
    requirement that is not met, and nothing of the first attempt is left in the output."""
    # asked for by the wheel's hook only: the sdist is built first, here, then dropped
    project = legacy_project(
        tmp_path / "legacy",
        "import sys\n"
        "from setuptools import setup\n"
        "asks = ['PyYAML<1'] if 'get_requires_for_build_wheel' in sys.orig_argv else []\n"
        "setup(name='probed', version='1.0', py_modules=['probed'], setup_requires=asks)\n",
    )
    isolated = []

    class Isolated(Exception):
        pass

    def build_isolated(project, outdir, env, unmet):
        isolated.append((unmet, sorted(p.name for p in outdir.glob("*"))))
        raise Isolated

    monkeypatch.setattr(backend, "build_isolated", build_isolated)
    out = tmp_path / "out"
    with pytest.raises(Isolated):
        run_build(project, out, tmp_path / "cache")
    assert isolated == [(["PyYAML<1"], [])]
    assert not (tmp_path / "cache" / "builds").exists()
