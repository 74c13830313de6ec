"""requirements-image.lock: the one place the image's packages are pinned, kept true to
pyproject.toml's ranges and to the kfp that compiled the committed YAMLs."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kfp_spot.image import lock, wheels
from kfp_spot.pipelines import catalog

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_lock_matches_pyproject_and_the_yamls_sdk_version():
    pins = lock.check_lock(REPO)  # raises, listing every problem, when it is out of date
    sdk = {
        re.search(r"^sdkVersion: kfp-(\S+)$", entry.default_path().read_text(), re.M)[1]
        for entry in (*catalog.COMPONENTS, *catalog.PIPELINES)
    }
    assert sdk == {pins["kfp"]}
    # Pins the whole closure, not just the direct requirements.
    assert {"kfp-pipeline-spec", "kfp-server-api", "protobuf", "google-auth"} <= set(pins)


def test_every_line_of_the_lock_is_an_exact_pin():
    for line in (REPO / lock.LOCK_FILE).read_text().splitlines():
        assert line.startswith("#") or re.fullmatch(r"[a-z0-9._-]+==[^\s]+", line), line


def test_an_out_of_date_lock_names_each_problem_and_the_fix(tmp_path):
    for name in ("pyproject.toml", lock.LOCK_FILE, "components/prepare_package/component.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((REPO / name).read_text())
    text = (tmp_path / lock.LOCK_FILE).read_text()
    text = re.sub(r"^kfp==.*$", "kfp==2.16.0", text, flags=re.M)
    text = re.sub(r"^click==.*$\n", "", text, flags=re.M)
    (tmp_path / lock.LOCK_FILE).write_text(text)
    with pytest.raises(lock.LockError) as info:
        lock.check_lock(tmp_path)
    message = str(info.value)
    assert "click is not pinned" in message
    assert "kfp==2.16.0 is not the kfp that compiled the YAMLs" in message
    assert "kfp-spot image lock" in message


def test_requirements_are_judged_by_the_images_python_not_the_hosts():
    pins = {"kfp": "2.17.3", "numpy": "1.25.0"}
    assert (
        lock.lock_problems(pins, ["kfp>=2.17,<3", "tomli>=1; python_version < '3.11'"], "2.17.3")
        == []
    )
    assert lock.lock_problems(pins, ["numpy>=1.26"], "2.17.3") == [
        "numpy==1.25.0 is outside numpy>=1.26"
    ]
    assert lock.lock_problems(pins, ["exceptiongroup; python_version >= '3.11'"], "2.17.3") == [
        "exceptiongroup is not pinned"
    ]


def test_a_line_that_is_not_a_pin_is_named(tmp_path):
    path = tmp_path / "x.lock"
    path.write_text("# header\nkfp==2.17.3\nnumpy>=1.26\n")
    with pytest.raises(lock.LockError, match=r"x.lock:3: 'numpy>=1.26' is not an exact pin"):
        lock.read_lock(path)
    with pytest.raises(lock.LockError, match="does not exist: run `kfp-spot image lock`"):
        lock.read_lock(tmp_path / "missing.lock")


def _other_python() -> str:
    """A host Python other than 3.11 (the image's), to show the host's version does not matter."""
    for version in ("3.13", "3.12", "3.10"):
        for candidate in Path("/root/.pyenv/versions").glob(f"{version}.*/bin/python3"):
            if (
                subprocess.run(
                    [candidate, "-m", "pip", "--version"], capture_output=True
                ).returncode
                == 0
            ):
                return str(candidate)
    if sys.version_info[:2] != (3, 11):
        return sys.executable
    pytest.skip("no Python other than 3.11 on this machine")


def test_dependency_wheels_are_fetched_for_the_image_whatever_the_hosts_python(tmp_path):
    # numpy: a compiled package (its wheel must be cp311 + manylinux x86_64 whatever the host);
    # kfp-server-api: a source distribution only (built on the host, pure Python).
    small = tmp_path / "small.lock"
    small.write_text("numpy==2.4.6\nkfp-server-api==2.17.3\n")
    python = _other_python()
    assert wheels.build_dependency_wheels(tmp_path / "wheels", small, [], python=python)
    names = sorted(p.name for p in (tmp_path / "wheels").glob("*.whl"))
    assert len(names) == 2, names
    kfp_server_api, numpy = names
    assert kfp_server_api.startswith("kfp_server_api-2.17.3-") and kfp_server_api.endswith(
        "-none-any.whl"
    )
    assert re.fullmatch(r"numpy-2\.4\.6-cp311-cp311-.*manylinux.*_x86_64\.whl", numpy), numpy
    assert (tmp_path / "wheels" / "requirements.txt").read_text() == small.read_text()
    # Unchanged lock: nothing is fetched again.
    assert not wheels.build_dependency_wheels(tmp_path / "wheels", small, [], python=python)


def test_regenerating_the_lock_without_uv_says_how_to_get_it(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from kfp_spot.cli import main

    monkeypatch.setenv("PATH", str(tmp_path))  # no uv there
    result = CliRunner().invoke(main, ["image", "lock", "--source", str(REPO)])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "kfp-spot: error: `kfp-spot image lock` needs uv: `pip install uv` (or pipx install uv)"
    )
