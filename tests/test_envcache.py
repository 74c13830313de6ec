"""Package environments: cached by content and by the host environment they see."""

import json
import subprocess
import sys
import tarfile
import textwrap
import zipfile

import pytest

from kfp_spot import envcache, executors
from kfp_spot.packaging.trainer_dist import build_trainer_wheel


def _wheel(tmp_path, version="0.1"):
    path = tmp_path / f"probe_pkg-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("probe_pkg/__init__.py", f"VERSION = {version!r}\n")
        whl.writestr(
            f"probe_pkg-{version}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: probe-pkg\nVersion: {version}\n",
        )
        whl.writestr(
            f"probe_pkg-{version}.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        whl.writestr(f"probe_pkg-{version}.dist-info/RECORD", "")
    return path


@pytest.fixture(scope="module")
def probe_env(tmp_path_factory):
    """probe_pkg 0.1's environment, built once in a fresh cache: (wheel, cache, its python).

    Shared by the test of what the environment sees and the test that the same packages reuse
    it: building one costs a venv and a pip install.
    """
    tmp = tmp_path_factory.mktemp("probe")
    wheel = _wheel(tmp)
    return wheel, tmp / "cache", envcache.package_env([str(wheel)], tmp / "cache")


def test_env_sees_the_package_and_this_hosts_site_packages(probe_env):
    _, _, python = probe_env
    code = "import probe_pkg, kfp_spot; print(probe_pkg.VERSION, kfp_spot.__file__)"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    version, kfp_spot_file = out.stdout.split()
    assert version == "0.1"
    import kfp_spot

    assert kfp_spot_file == kfp_spot.__file__  # the host's kfp_spot, not another copy


def test_same_packages_reuse_one_env_other_hosts_get_their_own(tmp_path, probe_env):
    wheel, cache, first = probe_env  # built by the fixture, in a cache of its own
    again = envcache.package_env([str(wheel)], cache)
    assert first == again
    # Another interpreter environment sharing the cache must not reuse an env that points at
    # this one's site-packages.
    other = tmp_path / "other-venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(other)],
        check=True,
    )
    here = envcache.site_packages_of(sys.executable)
    script = textwrap.dedent(
        f"""
        import site
        site.addsitedir({str(here)!r})  # this project's code, seen from the other venv
        from kfp_spot import envcache
        print(envcache.package_env([{str(wheel)!r}], {str(cache)!r}))
        """
    )
    out = subprocess.run(
        [str(other / "bin" / "python"), "-c", script], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() != str(first)


def test_a_relative_cache_dir_gives_an_absolute_python(probe_env, monkeypatch):
    # The emulator starts a replica's python in the replica's own working directory: a relative
    # path (from `--env-cache-dir relcache`) failed every job with "No such file or directory:
    # 'relcache/envs/.../bin/python'".
    wheel, cache, first = probe_env
    monkeypatch.chdir(cache.parent)
    python = envcache.package_env([str(wheel)], cache.name)  # the fixture's environment
    assert python.is_absolute() and python == first


SKLEARN = "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest"
PYTORCH = "us-docker.pkg.dev/vertex-ai/training/pytorch-xla.2-3.py310:latest"


def _declaring_wheel(tmp_path, requires=(), requires_python=""):
    path = tmp_path / "needs_pkg-0.1-py3-none-any.whl"
    meta = "Metadata-Version: 2.1\nName: needs-pkg\nVersion: 0.1\n"
    meta += f"Requires-Python: {requires_python}\n" if requires_python else ""
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("needs_pkg/__init__.py", "")
        whl.writestr("needs_pkg-0.1.dist-info/METADATA", meta)
        whl.writestr(
            "needs_pkg-0.1.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        whl.writestr("needs_pkg-0.1.dist-info/RECORD", "")
    return path


def _imports(python, *modules):
    """Which of ``modules`` import in the environment of ``python`` (from an empty directory)."""
    code = (
        "import importlib, json, sys\n"
        "ok = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name); ok[name] = True\n"
        "    except ImportError:\n"
        "        ok[name] = False\n"
        "print(json.dumps(ok))\n"
    )
    out = subprocess.run(
        [str(python), "-c", code, *modules], capture_output=True, text=True, check=True, cwd="/"
    )
    return json.loads(out.stdout)


def test_image_env_holds_the_profile_and_the_declared_requirements_only(tmp_path):
    # PyYAML is installed here and declared by the package; it is not in the sklearn image.
    # Markers are read for the image's VM (Linux x86_64, Python 3.10), not for this machine
    # (Python 3.11): tabulate is installed here but only declared for 3.11, sortedcontainers for
    # 3.10 only.
    requires = [
        'PyYAML>=5; platform_machine == "x86_64"',
        'tabulate; python_version >= "3.11"',
        'sortedcontainers; python_version < "3.11"',
        'tomlkit; sys_platform == "darwin"',
    ]
    wheel = _declaring_wheel(tmp_path, requires=requires)
    python = envcache.package_env([str(wheel)], tmp_path / "cache", executor_image_uri=SKLEARN)
    seen = _imports(
        python,
        "needs_pkg",
        "yaml",  # declared
        "tabulate",  # declared for a Python the VM does not have
        "sortedcontainers",  # declared for the VM's Python, not this machine's
        "tomlkit",  # declared for a Mac
        "numpy",  # the image's libraries
        "sklearn",
        "scipy",
        "xgboost",  # documented as xgboost, installed here as xgboost-cpu (or xgboost on a Mac)
        "google.cloud.storage",  # one part of the google namespace ...
        "google.cloud.aiplatform",  # ... but not another that is installed here
        "kfp",  # installed here, in no training image
        "kfp_spot",
        "gcsfs",
        "matplotlib",
    )
    assert seen == {
        "needs_pkg": True,
        "yaml": True,
        "tabulate": False,
        "sortedcontainers": True,
        "tomlkit": False,
        "numpy": True,
        "sklearn": True,
        "scipy": True,
        "xgboost": True,
        "google.cloud.storage": True,
        "google.cloud.aiplatform": False,
        "kfp": False,
        "kfp_spot": False,
        "gcsfs": False,
        "matplotlib": False,
    }
    assert (
        envcache.package_env([str(wheel)], tmp_path / "cache", executor_image_uri=SKLEARN) == python
    )  # cached


def test_another_image_has_other_libraries(tmp_path):
    wheel = _declaring_wheel(tmp_path)
    python = envcache.package_env([str(wheel)], tmp_path / "cache", executor_image_uri=PYTORCH)
    assert _imports(python, "sklearn", "numpy", "needs_pkg") == {
        "sklearn": False,  # not in pytorch-xla.2-3.py310's documented list
        "numpy": False,
        "needs_pkg": True,
    }


def test_a_package_refusing_the_images_python_does_not_install(tmp_path):
    wheel = _declaring_wheel(tmp_path, requires_python=">=3.11")
    with pytest.raises(
        envcache.PackageInstallError,
        match=r"needs-pkg' requires a different Python: 3.10 \(the Python of sklearn-cpu.1-6\) "
        r"not in '>=3.11'",
    ):
        envcache.package_env([str(wheel)], tmp_path / "cache", executor_image_uri=SKLEARN)


def _setuptools_sdist(tmp_path, module, project_extra=""):
    """The sdist of a setuptools project holding the one package ``module`` (``X = 1``)."""
    project = tmp_path / f"{module}-0.1"
    (project / module).mkdir(parents=True)
    (project / module / "__init__.py").write_text("X = 1\n")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{module.replace("_", "-")}"\nversion = "0.1"\n{project_extra}'
    )
    sdist = tmp_path / f"{module}-0.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(project, arcname=project.name)
    return sdist


def test_an_sdist_refusing_the_images_python_is_judged_against_that_python(tmp_path):
    # not against this machine's, where it is built into a wheel first
    sdist = _setuptools_sdist(tmp_path, "needs_new", 'requires-python = ">=3.99"\n')
    with pytest.raises(
        envcache.PackageInstallError,
        match=r"needs-new' requires a different Python: 3.10 \(the Python of sklearn-cpu.1-6\) "
        r"not in '>=3.99'",
    ):
        envcache.package_env([str(sdist)], tmp_path / "cache", executor_image_uri=SKLEARN)


def test_an_unknown_image_is_refused(tmp_path):
    with pytest.raises(executors.ExecutorImageError, match="not a prebuilt training image"):
        envcache.package_env([], tmp_path / "cache", executor_image_uri="python:3.11")


def test_host_view_env_uses_the_hosts_kfp_spot_not_the_light_wheel(tmp_path):
    light = build_trainer_wheel(tmp_path / "light")
    python = envcache.package_env([str(light)], tmp_path / "cache")
    code = "import kfp_spot.evaluation, kfp_spot; print(kfp_spot.__file__)"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    import kfp_spot

    assert out.stdout.strip() == kfp_spot.__file__


def _sdist(tmp_path, name, requires):
    path = tmp_path / f"{name}-0.1.tar.gz"
    pyproject = f"[build-system]\nrequires = {json.dumps(requires)}\nbuild-backend = 'x'\n"
    src = tmp_path / f"{name}-src"
    src.mkdir()
    (src / "pyproject.toml").write_text(pyproject)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(src / "pyproject.toml", f"{name}-0.1/pyproject.toml")
    return path


def test_an_sdist_whose_backend_this_host_lacks_is_built_isolated_as_on_the_vm(
    tmp_path, monkeypatch
):
    """pip on the training VM builds an sdist in an isolated environment with its backend from
    the index; building it here without isolation failed a hatchling project's job, locally only
    (``Cannot import build backend 'hatchling.build'``)."""
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        dest = cmd[cmd.index("--wheel-dir") + 1]
        name = cmd[-1].rsplit("/", 1)[-1].split("-")[0]
        open(f"{dest}/{name}-0.1-py3-none-any.whl", "w").close()
        return subprocess.CompletedProcess(cmd, 0, "", "")

    built_here = []

    def build_here(sdist, dest):
        built_here.append(sdist.name)
        wheel = dest / f"{sdist.name.split('-')[0]}-0.1-py3-none-any.whl"
        wheel.touch()
        return wheel, {}

    monkeypatch.setattr(envcache.subprocess, "run", run)
    monkeypatch.setattr(envcache, "_build_here", build_here)
    here = _sdist(tmp_path, "here", ["setuptools>=40"])
    elsewhere = _sdist(tmp_path, "elsewhere", ["surely-not-installed-backend>=1"])
    legacy = tmp_path / "legacy-0.1.tar.gz"  # no pyproject.toml: setuptools
    with tarfile.open(legacy, "w:gz"):
        pass
    envcache.build_wheels([here, elsewhere, legacy], tmp_path / "out")
    assert built_here == ["here-0.1.tar.gz", "legacy-0.1.tar.gz"]
    assert [cmd[-1].rsplit("/", 1)[-1] for cmd in calls] == ["elsewhere-0.1.tar.gz"]
    assert "--no-build-isolation" not in calls[0]


def _setup_py_sdist(tmp_path, requires):
    """A setup.py project (``sneaky``) whose setup.py imports NumPy, installed here."""
    project = tmp_path / f"src-{len(requires)}" / "sneaky-0.1"
    (project / "sneaky").mkdir(parents=True)
    (project / "sneaky" / "__init__.py").write_text("X = 1\n")
    (project / "pyproject.toml").write_text(
        f"[build-system]\nrequires = {json.dumps(requires)}\n"
        'build-backend = "setuptools.build_meta"\n'
    )
    (project / "setup.py").write_text(
        "import numpy\nfrom setuptools import setup\n"
        'setup(name="sneaky", version="0.1", packages=["sneaky"])\n'
    )
    sdist = tmp_path / f"sneaky-{len(requires)}" / "sneaky-0.1.tar.gz"
    sdist.parent.mkdir()
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(project, arcname=project.name)
    return sdist


def test_an_sdist_built_here_sees_only_its_build_requirements_as_on_the_vm(tmp_path):
    """pip on the VM builds it with only ``[build-system] requires`` installed: a setup.py that
    imports an undeclared module fails there, so it fails here too, naming the module and the
    fix, although NumPy is installed here (the emulator's job built it and ran)."""
    undeclared = _setup_py_sdist(tmp_path, ["setuptools>=61"])
    with pytest.raises(envcache.PackageInstallError) as refused:
        envcache.build_wheels([undeclared], tmp_path / "out", tmp_path / "cache")
    message = str(refused.value)
    assert message.startswith("sneaky-0.1.tar.gz did not build into a wheel")
    assert "The build imported 'numpy', which none of its build requirements" in message
    assert "Add the distribution that provides it to [build-system] requires" in message
    declared = _setup_py_sdist(tmp_path, ["setuptools>=61", "numpy"])
    (wheel,) = envcache.build_wheels([declared], tmp_path / "out2", tmp_path / "cache")
    assert zipfile.ZipFile(wheel).read("sneaky/__init__.py") == b"X = 1\n"


def test_the_wheel_of_an_sdist_is_built_once_per_sdist_interpreter_and_build_tools(tmp_path):
    """The job's and the evaluation's environments install the same sdist: one build serves both."""
    sdist = _setuptools_sdist(tmp_path, "tinymod")
    src = tmp_path / "tinymod-0.1"
    cache = tmp_path / "cache"
    (first,) = envcache.build_wheels([sdist], tmp_path / "one", cache)
    assert zipfile.ZipFile(first).read("tinymod/__init__.py") == b"X = 1\n"
    (entry,) = (cache / "wheels").iterdir()
    (entry / first.name).write_bytes(b"kept")  # marked: a rebuild would not give these bytes
    (again,) = envcache.build_wheels([sdist], tmp_path / "two", cache)
    assert again.read_bytes() == b"kept" and again.parent.parent == tmp_path / "two"
    # Other bytes are another sdist: built, and kept beside the first.
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(src, src.name)
        tar.add(src / "tinymod" / "__init__.py", "tinymod-0.1/tinymod/extra.py")
    (other,) = envcache.build_wheels([sdist], tmp_path / "three", cache)
    assert "tinymod/extra.py" in zipfile.ZipFile(other).namelist()
    assert len(list((cache / "wheels").iterdir())) == 2


def test_an_sdist_built_isolated_is_never_kept(tmp_path, monkeypatch):
    """Its backend comes from the package index at build time: the next build may differ."""
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        dest = cmd[cmd.index("--wheel-dir") + 1]
        open(f"{dest}/elsewhere-0.1-py3-none-any.whl", "w").close()
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(envcache.subprocess, "run", run)
    elsewhere = _sdist(tmp_path, "elsewhere", ["surely-not-installed-backend>=1"])
    for out in ("one", "two"):
        envcache.build_wheels([elsewhere], tmp_path / out, tmp_path / "cache")
    assert len(calls) == 2 and all("--no-build-isolation" not in cmd for cmd in calls)
    assert not (tmp_path / "cache" / "wheels").exists()


def test_a_host_view_environment_builds_an_sdist_as_the_image_environments_do(tmp_path):
    """Tools' and tests' environments see this machine's libraries, but their packages' builds
    still see only the build requirements: pip installed such an sdist without isolation."""
    undeclared = _setup_py_sdist(tmp_path, ["setuptools>=61"])
    with pytest.raises(envcache.PackageInstallError, match="The build imported 'numpy'"):
        envcache.package_env([str(undeclared)], tmp_path / "cache")


def test_an_sdist_whose_backend_asks_for_what_is_not_installed_here_is_built_isolated(
    tmp_path, monkeypatch
):
    """pip on the VM installs what ``setup_requires`` names; the installed PyYAML is too new."""
    project = tmp_path / "src" / "asks-0.1"
    project.mkdir(parents=True)
    (project / "asks.py").write_text("X = 1\n")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    (project / "setup.py").write_text(
        "from setuptools import setup\n"
        "setup(name='asks', version='0.1', py_modules=['asks'], setup_requires=['PyYAML<1'])\n"
    )
    sdist = tmp_path / "asks-0.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(project, arcname=project.name)
    isolated = []

    def build_isolated(sdist, dest):
        isolated.append(sdist.name)
        wheel = dest / "asks-0.1-py3-none-any.whl"
        wheel.write_bytes(b"isolated")
        return wheel

    monkeypatch.setattr(envcache, "_build_isolated", build_isolated)
    (wheel,) = envcache.build_wheels([sdist], tmp_path / "out", tmp_path / "cache")
    assert isolated == ["asks-0.1.tar.gz"] and wheel.read_bytes() == b"isolated"
    assert not (tmp_path / "cache" / "wheels").exists()  # from the package index: never kept


@pytest.mark.parametrize("form", ["{}", "file://{}"])
def test_a_package_uri_that_is_a_directory_is_named_as_given(tmp_path, form):
    # The copy's own error named a folder of the download cache the user never gave:
    # "[Errno 2] No such file or directory: '<cache>/download-xyz/0/dist'".
    (tmp_path / "dist").mkdir()
    uri = form.format(tmp_path / "dist")
    with pytest.raises(IsADirectoryError) as info:
        envcache.fetch(uri, tmp_path / "download")
    assert str(info.value) == (
        f"package URI {uri!r} is a directory: give the package file in it (an sdist "
        "NAME-VERSION.tar.gz or a wheel)"
    )
