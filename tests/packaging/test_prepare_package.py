"""prepare_package on a real project: reproducible, staged by sha256, cached, installable."""

import hashlib
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from kfp_spot import envcache, fs
from kfp_spot.packaging import PackagingError, component_entry, prepare_package
from kfp_spot.packaging.build import wheel_facts
from kfp_spot.packaging.entry_points import check_entry_point
from tests import prepare


def sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def staging_of(info) -> Path:
    return Path(info.uri).parents[2]


def test_staging_layout_and_metadata(built):
    staging = staging_of(built)
    assert built.name == "tiny-trainer" and built.version == "1.2.3"
    assert built.uri == str(staging / "tiny-trainer" / built.sha256 / "tiny_trainer-1.2.3.tar.gz")
    assert sha256(built.uri) == built.sha256
    assert built.size == Path(built.uri).stat().st_size
    assert built.python_module == "tinytrainer.task"  # the package's one *.task module
    assert built.requirements == ("numpy>=1.20",)
    assert built.package_uris == (built.uri,)  # the sdist, even with a wheel built
    assert not built.cache_hit
    meta = built.metadata()
    assert meta["sha256"] == built.sha256 and meta["package_uris"] == [built.uri]
    assert meta["requirements"] == ["numpy>=1.20"]


def test_wheel_is_staged_by_its_own_sha256(built):
    assert built.wheel_uri.endswith("tiny_trainer-1.2.3-py3-none-any.whl")
    assert sha256(built.wheel_uri) == built.wheel_sha256
    assert Path(built.wheel_uri).parent.name == built.wheel_sha256


def test_sdist_entries_are_sorted_with_fixed_times_and_owners(built):
    with tarfile.open(built.uri) as tf:
        members = tf.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert {m.mtime for m in members} == {315532800}
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
    assert Path(built.uri).read_bytes()[4:8] == b"\0\0\0\0"  # gzip header mtime


def test_same_source_elsewhere_gives_the_same_bytes_and_a_cache_hit(built, tmp_path):
    # A copy of the source in another place, with other mtimes, built later, same staging.
    source = Path(built.uri).parents[3] / "src" / "tiny"
    copy = tmp_path / "elsewhere" / "tiny"
    shutil.copytree(source, copy)
    for path in copy.rglob("*"):
        os.utime(path, (time.time() + 1000, time.time() + 1000))
    before = os.stat(built.uri), os.stat(built.wheel_uri)
    again = prepare_package(str(copy), str(staging_of(built)), build_wheel=True)
    assert (again.sha256, again.wheel_sha256) == (built.sha256, built.wheel_sha256)
    assert again.cache_hit and again.uri == built.uri
    after = os.stat(built.uri), os.stat(built.wheel_uri)
    # Nothing was written: same files, same modification times.
    assert [(s.st_ino, s.st_mtime_ns) for s in after] == [(s.st_ino, s.st_mtime_ns) for s in before]
    # The build never writes into the user's tree.
    assert sorted(p.name for p in copy.iterdir()) == ["README.md", "pyproject.toml", "tinytrainer"]


def test_a_changed_source_gives_a_new_sha256(built, project):
    (project / "tinytrainer" / "task.py").write_text("print('changed')\n")
    changed = prepare_package(str(project), str(staging_of(built)))
    assert changed.sha256 != built.sha256 and not changed.cache_hit


def test_a_damaged_staged_file_is_replaced_not_reported_as_a_hit(built, project, tmp_path):
    staging = tmp_path / "stage"
    shutil.copytree(staging_of(built), staging)
    damaged = staging / "tiny-trainer" / built.sha256 / built.filename
    damaged.write_bytes(bytes(built.size))  # same size, wrong bytes
    # the build is not what is tested here: the run's build cache has the tiny project's
    again = prepare.prepare_package(str(project), str(staging))
    assert not again.cache_hit and again.sha256 == built.sha256
    assert sha256(damaged) == built.sha256


def test_staged_sdist_installs_and_its_module_runs(built, tmp_path, env_cache):
    python = envcache.package_env([built.uri], env_cache)
    proc = subprocess.run(
        [str(python), "-m", built.python_module, "--epochs", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert '"trained": true' in proc.stdout and "--epochs" in proc.stdout


def test_import_check_passes_with_declared_and_provided_dependencies(project, tmp_path):
    # numpy and scikit-learn are declared; kfp_spot comes as the kfp-spot-trainer wheel; the
    # package's own modules import.
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"numpy>=1.20"', '"numpy", "scikit-learn"'))
    (project / "tinytrainer" / "task.py").write_text(
        "import numpy, sklearn.linear_model\nimport kfp_spot.checkpoints\n"
        "from tinytrainer import evaluate\n"
    )
    info = prepare_package(str(project), str(tmp_path / "stage"), check_import=True)
    assert info.import_checked


def test_component_entry_fills_the_artifact_and_stages_next_to_it(project, tmp_path):
    extra = tmp_path / "deps" / "helper-0.1.tar.gz"
    extra.parent.mkdir()
    extra.write_bytes(b"only checked for existence")
    artifact = SimpleNamespace(uri=str(tmp_path / "outputs" / "package"), metadata={})
    outputs = component_entry(
        source=str(project), package=artifact, extra_package_uris=[str(extra)]
    )
    assert artifact.uri.startswith(str(tmp_path / "outputs" / "package" / "tiny-trainer"))
    assert Path(artifact.uri).is_file()
    assert outputs.package_uris == [artifact.uri, str(extra)]
    meta = artifact.metadata
    assert meta["name"] == "tiny-trainer" and meta["version"] == "1.2.3"
    assert meta["sha256"] == sha256(artifact.uri)
    assert meta["python_module"] == "tinytrainer.task"
    assert meta["size"] == Path(artifact.uri).stat().st_size
    assert meta["cache_hit"] is False
    assert meta["package_uris"] == [artifact.uri, str(extra)]
    assert meta["staging_uri"] == str(tmp_path / "outputs" / "package")


def test_the_package_names_its_evaluation_entry_point_for_a_pipeline_that_leaves_it_empty(
    project, tmp_path
):
    """On Vertex AI the evaluation reads the package's own entry point from the artifact, as a
    local ``kfp-spot run`` reads it from the pyproject: the same package scores the same way."""
    assert (
        prepare.prepare_package(str(project), str(tmp_path / "a")).metadata()[
            "evaluation_entry_point"
        ]
        == ""
    )
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text()
        + '\n[tool.kfp-spot]\nevaluation-entry-point = "tinytrainer.evaluate:evaluate"\n'
    )
    artifact = SimpleNamespace(uri=str(tmp_path / "outputs" / "package"), metadata={})
    component_entry(source=str(project), package=artifact)
    assert artifact.metadata["evaluation_entry_point"] == "tinytrainer.evaluate:evaluate"


def test_a_malformed_evaluation_entry_point_is_refused_before_anything_is_staged(project, tmp_path):
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text() + '\n[tool.kfp-spot]\nevaluation-entry-point = "tinytrainer.ev"\n'
    )
    with pytest.raises(
        PackagingError, match=r"evaluation-entry-point 'tinytrainer\.ev' is not"
    ) as info:
        prepare_package(str(project), str(tmp_path / "stage"))
    assert info.value.field == "source"
    assert not (tmp_path / "stage").exists()


@pytest.mark.parametrize(
    ("entry_point", "message"),
    [
        (  # a typo of the package's own module
            "tinytrainer.evaluat:evaluate",
            r"module 'tinytrainer\.evaluat' is not in the built package tiny-trainer 1\.2\.3: "
            r"the package holds 'tinytrainer' but not this module",
        ),
        (  # a file of the source the build leaves out
            "scoring:evaluate",
            r"module 'scoring' is not in the built package tiny-trainer 1\.2\.3: it is in the "
            r"source but the build leaves it out",
        ),
        (  # a function the module does not define
            "tinytrainer.evaluate:evaluat",
            r"tinytrainer/evaluate\.py defines no 'evaluat' \(its functions: evaluate, "
            r"score_without_params\)",
        ),
    ],
)
def test_an_entry_point_the_built_package_cannot_serve_is_refused_before_the_training(
    project, tmp_path, entry_point, message
):
    """evaluate_checkpoint imports it only after the whole (paid) training."""
    (project / "scoring.py").write_text("def evaluate(checkpoint_dir, params):\n    return {}\n")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text() + f'\n[tool.kfp-spot]\nevaluation-entry-point = "{entry_point}"\n'
    )
    with pytest.raises(PackagingError, match=message) as info:
        prepare_package(str(project), str(tmp_path / "stage"))
    assert info.value.field == "source"
    assert "evaluation would fail after the training" in str(info.value)
    assert not (tmp_path / "stage").exists()


def test_an_entry_point_named_by_its_src_path_names_the_module_to_give(project, tmp_path):
    # src.tinytrainer.evaluate was "in the source but the build leaves it out (list it in the
    # build's packages ...)": src/ of a src layout is a folder, never a package to list.
    (project / "src").mkdir()
    (project / "tinytrainer").rename(project / "src" / "tinytrainer")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('packages = ["tinytrainer"]', 'package-dir = {"" = "src"}')
        + '\n[tool.kfp-spot]\nevaluation-entry-point = "src.tinytrainer.evaluate:evaluate"\n'
    )
    with pytest.raises(PackagingError) as info:
        prepare_package(str(project), str(tmp_path / "stage"))
    assert (
        "module 'src.tinytrainer.evaluate' is not in the built package tiny-trainer 1.2.3: src/ "
        "is the source layout's folder, not a package: name the module "
        "tinytrainer.evaluate:evaluate; the evaluation would fail after the training"
    ) in str(info.value)


def test_an_entry_point_of_a_dependency_or_bound_by_an_import_is_left_to_the_evaluation(
    project, tmp_path
):
    (project / "tinytrainer" / "ev.py").write_text(
        "from tinytrainer.evaluate import evaluate as score\n"
        "try:\n    from fast import metric\nexcept ImportError:\n    metric = None\n"
        "print(walrused := score)\n"
        "def setup():\n    global late\n    late = score\n"
    )
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text()
        + '\n[tool.kfp-spot]\nevaluation-entry-point = "tinytrainer.ev:score"\n'
    )
    info = prepare_package(str(project), str(tmp_path / "stage"), build_wheel=True)
    assert info.evaluation_entry_point == "tinytrainer.ev:score"
    # The others through the check prepare_package ran, on the wheel it built: one build, not
    # one per entry point (each would build a new tree, only to reach the same function).
    wheel = Path(str(fs.to_local_path(info.wheel_uri)))
    facts = wheel_facts(wheel)
    bound = ("metric", "walrused", "late")
    for entry_point in [*(f"tinytrainer.ev:{n}" for n in bound), "sklearn_ext.ev:score"]:
        check_entry_point(wheel, facts, entry_point, project)


def test_a_package_is_read_before_a_same_named_module_as_python_imports_it(project, tmp_path):
    # Python imports tinytrainer/scoring/ (the package), not tinytrainer/scoring.py beside it.
    (project / "tinytrainer" / "scoring.py").write_text("def other(d, p):\n    return {}\n")
    (project / "tinytrainer" / "scoring").mkdir()
    (project / "tinytrainer" / "scoring" / "__init__.py").write_text(
        "def evaluate(d, p):\n    return {}\n"
    )
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text().replace(
        'packages = ["tinytrainer"]', 'packages = ["tinytrainer", "tinytrainer.scoring"]'
    )
    entry_point = "tinytrainer.scoring:evaluate"
    pyproject.write_text(text + f'\n[tool.kfp-spot]\nevaluation-entry-point = "{entry_point}"\n')
    info = prepare_package(str(project), str(tmp_path / "stage"))
    assert info.evaluation_entry_point == entry_point
