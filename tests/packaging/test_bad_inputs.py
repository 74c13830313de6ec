"""Bad inputs to prepare_package: each a clear error naming the problem; nothing is staged."""

import os

import pytest

from kfp_spot.packaging import (
    MAX_PACKAGE_URIS,
    BuildError,
    MissingProjectFileError,
    ModuleNotInPackageError,
    ModuleSyntaxError,
    PackageUrisError,
    PackagingError,
    SourceError,
)
from tests.prepare import prepare_package


@pytest.fixture
def staging(tmp_path):
    path = tmp_path / "stage"
    yield path
    assert not path.exists() or not any(path.rglob("*.tar.gz")), "a bad package was staged"


def test_missing_source(tmp_path, staging):
    with pytest.raises(SourceError, match=r"source: .*nowhere does not exist"):
        prepare_package(str(tmp_path / "nowhere"), str(staging))


def test_empty_source(staging):
    with pytest.raises(SourceError, match=r"source: is empty"):
        prepare_package("  ", str(staging))


@pytest.mark.parametrize("name", ["tränier", "my trainer", "-trainer", "trainer."])
def test_a_project_name_no_build_backend_takes_is_one_line(tmp_path, staging, name):
    # setuptools refuses it with a traceback whose last line names `project.name`
    src = tmp_path / "named"
    (src / "trainer").mkdir(parents=True)
    (src / "trainer" / "__init__.py").write_text("")
    (src / "trainer" / "task.py").write_text("print(1)\n")
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "1.0"\n'
    )
    with pytest.raises(PackagingError) as info:
        prepare_package(str(src), str(staging))
    assert str(info.value) == (
        f"source: pyproject.toml [project] name {name!r} is not a valid distribution name: "
        "ASCII letters, digits, '.', '-' and '_', beginning and ending with a letter or digit"
    )


def test_directory_without_project_file(tmp_path, staging):
    src = tmp_path / "loose"
    src.mkdir()
    (src / "train.py").write_text("print(1)\n")
    with pytest.raises(MissingProjectFileError, match=r"no project file \(pyproject.toml"):
        prepare_package(str(src), str(staging))


def test_syntax_error_in_the_module(project, staging):
    (project / "tinytrainer" / "task.py").write_text("def main(:\n    pass\n")
    with pytest.raises(ModuleSyntaxError, match=r"tinytrainer/task\.py line 1"):
        prepare_package(str(project), str(staging))


def test_syntax_error_elsewhere_in_the_package(project, staging):
    (project / "tinytrainer" / "util.py").write_text("x = = 1\n")
    with pytest.raises(ModuleSyntaxError, match=r"tinytrainer/util\.py line 1"):
        prepare_package(str(project), str(staging))


def test_a_null_byte_in_a_module_names_the_file_without_a_line(project, staging):
    # compile() gives no line for it: the message read "tinytrainer/util.py line None: ..."
    (project / "tinytrainer" / "util.py").write_bytes(b"x = 1\x00\n")
    with pytest.raises(ModuleSyntaxError) as info:
        prepare_package(str(project), str(staging))
    assert str(info.value).startswith(
        "source: tinytrainer/util.py: source code string cannot contain null bytes"
    ), str(info.value)


def test_module_not_in_the_package(project, staging):
    with pytest.raises(ModuleNotInPackageError, match=r"'tinytrainer.train' is not in the built"):
        prepare_package(str(project), str(staging), python_module="tinytrainer.train")


def test_module_left_out_of_the_package_by_its_config(project, staging):
    # The project lists only `tinytrainer`; a module in another folder is not packaged.
    (project / "other").mkdir()
    (project / "other" / "__init__.py").write_text("")
    (project / "other" / "task.py").write_text("print(1)\n")
    with pytest.raises(ModuleNotInPackageError, match=r"it holds: tinytrainer"):
        prepare_package(str(project), str(staging), python_module="other.task")


def test_invalid_module_name(project, staging):
    with pytest.raises(PackagingError, match=r"python_module: 'trainer/task.py' is not a dotted"):
        prepare_package(str(project), str(staging), python_module="trainer/task.py")


def test_too_many_package_uris(project, tmp_path, staging):
    extras = [f"gs://bucket/dep-{i}.tar.gz" for i in range(MAX_PACKAGE_URIS)]
    with pytest.raises(PackageUrisError, match=r"make 101 package URIs; .* at most 100"):
        prepare_package(str(project), str(staging), extra_package_uris=extras)


def test_missing_extra_package(project, tmp_path, staging):
    with pytest.raises(PackageUrisError, match=r"extra_package_uris\[0\]: .* does not exist"):
        prepare_package(
            str(project), str(staging), extra_package_uris=[str(tmp_path / "dep-1.0.tar.gz")]
        )


def test_extra_package_that_is_no_archive(project, staging):
    with pytest.raises(PackageUrisError, match=r"extra_package_uris\[0\]: .* not a package"):
        prepare_package(str(project), str(staging), extra_package_uris=["gs://b/dep.txt"])


@pytest.mark.parametrize("content", [b"this is not gzip data", b"", bytes(range(256)) * 3])
def test_unreadable_archive(tmp_path, staging, content):
    archive = tmp_path / "src.tar.gz"
    archive.write_bytes(content)
    with pytest.raises(SourceError, match=r"source: .*src\.tar\.gz is not a readable tar\.gz") as e:
        prepare_package(str(archive), str(staging))
    # one line: tarfile's own message has a line per compression method it tried
    assert "\n" not in str(e.value)


def test_a_source_path_longer_than_the_filesystem_takes(staging):
    # os.stat's ENAMETOOLONG escaped as a traceback; the error shows the path cut short
    with pytest.raises(SourceError, match=r"^source: 'xxxx.*\.\.\.x': File name too long$") as e:
        prepare_package("x" * 5000, str(staging))
    assert len(str(e.value)) < 200


def test_archive_escaping_its_directory(tmp_path, staging):
    import io
    import tarfile

    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        info = tarfile.TarInfo("../../escape.py")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(SourceError, match=r"source: .*unsafe"):
        prepare_package(str(archive), str(staging))
    assert not (tmp_path / "escape.py").exists()


def test_file_of_an_unknown_kind(tmp_path, staging):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    with pytest.raises(SourceError, match=r"neither a \.py script nor a source archive"):
        prepare_package(str(notes), str(staging))


def test_a_script_that_is_a_fifo_is_refused_not_read(tmp_path, staging):
    # `source=task.py` a named pipe: the script's read waited for a writer that never came.
    script = tmp_path / "task.py"
    os.mkfifo(script)
    with pytest.raises(SourceError, match=r"task\.py is neither a directory nor a regular file"):
        prepare_package(str(script), str(staging))


def test_invalid_pyproject(project, staging):
    (project / "pyproject.toml").write_text("[project\nname = 'x'\n")
    with pytest.raises(BuildError, match=r"pyproject.toml is not valid TOML"):
        prepare_package(str(project), str(staging))


def test_build_failure_shows_the_build_output(project, staging):
    (project / "setup.py").write_text("raise SystemExit('setup.py refuses to run')\n")
    # setup.py first runs when the backend is asked what it needs to build the sdist
    hook_failed = (
        r"the build failed \(the build backend's get_requires_for_build_sdist hook, exit 1\)"
    )
    with pytest.raises(BuildError, match=rf"(?s){hook_failed}.*refuses to run"):
        prepare_package(str(project), str(staging))


def test_empty_staging_uri(project):
    with pytest.raises(PackagingError, match=r"staging_uri: is empty"):
        prepare_package(str(project), "")


def test_bad_requirement_for_a_script(tmp_path, staging):
    script = tmp_path / "job.py"
    script.write_text("print(1)\n")
    with pytest.raises(PackagingError, match=r"requirements: 'numpy >> 1' is not a PEP 508"):
        prepare_package(str(script), str(staging), requirements=["numpy >> 1"])


def test_a_bad_requirement_is_one_line_with_the_reason(tmp_path, staging):
    # packaging's own message spans three lines (the requirement and a caret under the fault).
    script = tmp_path / "job.py"
    script.write_text("print(1)\n")
    with pytest.raises(PackagingError) as info:
        prepare_package(str(script), str(staging), requirements=["numpy>=>1"])
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("requirements: 'numpy>=>1' is not a PEP 508 requirement (")


def test_unknown_executor_image_is_refused_before_building(project, staging):
    with pytest.raises(
        PackagingError,
        match=r"executor_image_uri: 'sklearn-cpu.nightly' is not a prebuilt training image; "
        r"images of that kind: sklearn-cpu.1-6, sklearn-cpu.1-0",
    ):
        prepare_package(
            str(project),
            str(staging),
            executor_image_uri="us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.nightly:latest",
        )


@pytest.mark.parametrize("check_import", [True, False])
def test_a_package_refusing_the_images_python_is_refused_before_it_is_staged(
    project, staging, check_import
):
    # sklearn-cpu.1-6 runs Python 3.10: pip on the VM would refuse this package. Without
    # check_import it was staged, and the job failed once its VMs had started.
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            'version = "1.2.3"', 'version = "1.2.3"\nrequires-python = ">=3.11"'
        )
    )
    with pytest.raises(
        PackagingError, match=r"requires a different Python: 3.10 .* not in '>=3.11'"
    ) as info:
        prepare_package(str(project), str(staging), check_import=check_import)
    assert info.value.field == "source"
    assert "pip would refuse it on the training VM; widen its requires-python" in str(info.value)
    assert not staging.exists() or not any(staging.iterdir())


def test_a_staging_bucket_name_no_bucket_can_have_is_refused_before_any_request(project):
    # Before: gcsfs was asked (and retried) for gs://UP, far from a one-line answer offline.
    with pytest.raises(
        PackagingError, match=r"staging_uri: gs://UP/x: 'UP' is not a Cloud Storage"
    ):
        prepare_package(str(project), "gs://UP/x")


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        # A bare URI is not a list: its letters were taken as package URIs ('g' is not ...).
        ({"extra_package_uris": "gs://b/dep.tar.gz"}, "extra_package_uris: is not valid JSON"),
        # KFP hands booleans over as booleans or "true"/"false"; "yes" was taken as True.
        ({"build_wheel": "yes"}, "build_wheel: expected true or false, got 'yes'"),
        ({"requirements": [3]}, "requirements: expected a list of strings"),
    ],
)
def test_the_components_inputs_are_read_as_kfp_hands_them_over(project, tmp_path, given, needle):
    from types import SimpleNamespace

    from kfp_spot.packaging.component import component_entry

    package = SimpleNamespace(uri=str(tmp_path / "package"), metadata={})
    with pytest.raises(PackagingError) as info:
        component_entry(source=str(project), package=package, **given)
    assert needle in str(info.value)
    assert not any(tmp_path.rglob("*.tar.gz")), "a package was staged"


@pytest.mark.parametrize("given", ["gs://", "gs:/my-bucket/staging", "gs:my-bucket", "GS:/b/x"])
def test_a_staging_uri_missing_its_slashes_is_not_a_local_folder(
    project, tmp_path, monkeypatch, given
):
    # Before: "gs://" lost its slashes to "gs:" and "gs:/my-bucket/staging" was a relative path:
    # the package was staged into a folder named "gs:" in the working directory, the run went on.
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with pytest.raises(PackagingError, match=r"^staging_uri: ") as caught:
        prepare_package(str(project), given)
    assert "gs://BUCKET/PATH" in str(caught.value) or "bucket name" in str(caught.value)
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (  # a TypeError traceback
            lambda text: "[tool]\nkfp-spot = 3\n\n" + text,
            "pyproject.toml's tool.kfp-spot is int 3, not a table: write [tool.kfp-spot] with keys",
        ),
        (  # a ValueError traceback from dict("trainer.task")
            lambda text: '[tool]\nkfp-spot = "tinytrainer.task"\n\n' + text,
            "pyproject.toml's tool.kfp-spot is str 'tinytrainer.task', not a table",
        ),
        (  # read letter by letter: "the build backend needs e, g, i, n, ..."
            lambda text: text.replace('requires = ["setuptools>=61"]', 'requires = "setuptools"'),
            "pyproject.toml's [build-system] requires is 'setuptools', not a list of strings: "
            'write requires = ["setuptools>=77"]',
        ),
        (  # an AttributeError traceback
            lambda text: (
                'build-system = "setuptools"\n' + text.replace("[build-system]", "[tool.other]", 1)
            ),
            "pyproject.toml's build-system is str 'setuptools', not a table: write [build-system]",
        ),
    ],
)
def test_a_pyproject_key_that_is_not_a_table_is_named(project, staging, edit, needle):
    pyproject = project / "pyproject.toml"
    pyproject.write_text(edit(pyproject.read_text()))
    with pytest.raises(PackagingError) as info:
        prepare_package(str(project), str(staging))
    assert str(info.value).startswith("source: ")
    assert needle in str(info.value)
    assert "\n" not in str(info.value)
