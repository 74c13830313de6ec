"""prepare_package reads and parses each file of the job's code once, for all its static readers."""

from collections import Counter
from pathlib import Path

from kfp_spot.packaging import imports
from tests.packaging.tiny import PYPROJECT, write_project
from tests.prepare import prepare_package


def test_one_prepare_package_call_parses_each_file_of_the_job_once(tmp_path, monkeypatch):
    project = write_project(tmp_path / "tiny")
    (project / "pyproject.toml").write_text(
        PYPROJECT + '\n[tool.kfp-spot]\nevaluation-entry-point = "tinytrainer.evaluate:evaluate"\n'
    )
    parsed: Counter[str] = Counter()
    parse = imports.parse

    def counted(source, filename="<unknown>", **options):
        parsed[filename] += 1
        return parse(source, filename, **options)

    monkeypatch.setattr(imports, "parse", counted)
    prepare_package(str(project), str(tmp_path / "stage"))
    # Every reader (imports of the job and of the evaluation, output directories, paths of this
    # machine, the mps device) reads the package's __init__, the task and the evaluation's module.
    # (the source's files by their path; the built wheel's own checks name its members)
    of_the_source = {name: n for name, n in parsed.items() if Path(name).is_absolute()}
    assert sorted(Path(name).name for name in of_the_source) == [
        "__init__.py",
        "evaluate.py",
        "task.py",
    ]
    assert set(of_the_source.values()) == {1}


def test_kfp_spot_runs_checks_before_the_run_share_one_reading(tmp_path, monkeypatch):
    import functools

    from kfp_spot.packaging.jobsource import JobSource
    from kfp_spot.pipelines import local_run

    project = write_project(tmp_path / "tiny")
    (project / "tinytrainer" / "task.py").write_text(
        "import os\n\nOUT = os.environ['AIP_MODEL_DIR']\nDATA = '/Users/alice/train.csv'\n"
    )
    parsed: Counter[str] = Counter()
    parse = imports.parse

    def counted(source, filename="<unknown>", **options):
        parsed[filename] += 1
        return parse(source, filename, **options)

    monkeypatch.setattr(imports, "parse", counted)
    arguments = {
        "source": str(project),
        "python_module": "tinytrainer.task",
        "evaluation_entry_point": "tinytrainer.evaluate:evaluate",
    }
    read = functools.cache(JobSource)
    assert local_run._raw_dirs(project, arguments, read)[0].startswith(
        "tinytrainer/task.py, line 3 reads AIP_MODEL_DIR"
    )
    assert "'/Users/alice/train.csv'" in local_run.laptop_paths(project, arguments, read)[0]
    assert sorted(Path(name).name for name in parsed) == ["__init__.py", "evaluate.py", "task.py"]
    assert set(parsed.values()) == {1}
