"""Output directories: given or from Vertex AI's variables, and gs:// through the /gcs mount.

On a Vertex AI training VM Cloud Storage is mounted at ``/gcs`` and the light kfp-spot-trainer
wheel brings no gcsfs: every root ``kfp_spot.trainer`` takes must then be used through the mount.
Here the mount is a temporary directory (``fs.GCS_MOUNT_ROOT`` pointed at it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kfp_spot import fs
from kfp_spot.trainer import (
    CheckpointManager,
    OutputDirs,
    add_output_dir_arguments,
    load_checkpoint,
    output_dirs,
    resolve_output_dirs,
)
from kfp_spot.trainer.integrations import directory
from kfp_spot.trainer.outputs import checkpoint_root

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake Cloud Storage FUSE mount with bucket ``my-bucket``."""
    root = tmp_path / "gcs"
    (root / "my-bucket").mkdir(parents=True)
    monkeypatch.setattr(fs, "GCS_MOUNT_ROOT", str(root))
    return root


def test_given_directories_win_over_the_variables() -> None:
    env = {"AIP_CHECKPOINT_DIR": "/env/ck", "AIP_MODEL_DIR": "/env/model"}
    assert output_dirs("/given/ck", None, environ=env) == OutputDirs("/given/ck", "/env/model")
    assert output_dirs(None, "/given/model", environ=env) == ("/env/ck", "/given/model")


@pytest.mark.parametrize(
    ("env", "variable", "option"),
    [
        ({}, "AIP_CHECKPOINT_DIR", "--checkpoint-dir"),
        ({"AIP_CHECKPOINT_DIR": "/ck"}, "AIP_MODEL_DIR", "--model-dir"),
        ({"AIP_CHECKPOINT_DIR": " ", "AIP_MODEL_DIR": "/m"}, "AIP_CHECKPOINT_DIR", "--checkpoint"),
    ],
)
def test_a_missing_directory_names_its_variable_and_option(env, variable, option) -> None:
    with pytest.raises(ValueError, match=rf"set {variable} .* or pass {option}"):
        output_dirs(environ=env)


def test_gs_directories_map_to_the_mount_where_the_bucket_is_mounted(mount: Path) -> None:
    dirs = output_dirs(
        environ={
            "AIP_CHECKPOINT_DIR": "gs://my-bucket/run/checkpoints/",
            "AIP_MODEL_DIR": "gs://x/m",
        }
    )
    assert dirs.checkpoint_dir == str(mount / "my-bucket" / "run" / "checkpoints") + "/"
    assert dirs.model_dir == "gs://x/m"  # bucket not mounted: gcsfs serves it, as before


def test_the_parser_helpers_fill_the_namespace_or_exit_2(
    mount: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser(prog="task")
    add_output_dir_arguments(parser)
    monkeypatch.setenv("AIP_MODEL_DIR", "gs://my-bucket/model")
    args = parser.parse_args(["--checkpoint-dir", "/ck"])
    assert resolve_output_dirs(parser, args) == ("/ck", str(mount / "my-bucket" / "model"))
    assert (args.checkpoint_dir, args.model_dir) == ("/ck", str(mount / "my-bucket" / "model"))
    monkeypatch.delenv("AIP_MODEL_DIR")
    with pytest.raises(SystemExit) as exited:
        resolve_output_dirs(parser, parser.parse_args([]))
    assert exited.value.code == 2
    assert "no checkpoint directory: set AIP_CHECKPOINT_DIR" in capsys.readouterr().err


def test_the_manager_and_directory_steps_use_the_mount(
    mount: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", "gs://my-bucket/run/checkpoints")
    assert CheckpointManager(handle_signals=False).root == str(
        mount / "my-bucket" / "run" / "checkpoints"
    )
    root = "gs://my-bucket/run/foreign"
    step = directory.step_directory(root, 3)
    assert step == str(mount / "my-bucket" / "run" / "foreign" / "step-3")
    os.makedirs(step)
    Path(step, "weights.bin").write_bytes(b"w" * 10)
    directory.commit_directory(root, 3)
    found = directory.latest_directory(root)
    assert found is not None and found.step == 3 and found.path == step


# Runs in a fresh interpreter with gcsfs and fsspec made unimportable: everything a trainer does
# with a gs:// root whose bucket is mounted must work by plain file I/O.
_ON_A_VM = """
import json, os, sys
sys.modules["gcsfs"] = None
sys.modules["fsspec"] = None
from kfp_spot import fs
fs.GCS_MOUNT_ROOT = sys.argv[1]
from kfp_spot.trainer import CheckpointManager, load_checkpoint
from kfp_spot.trainer.integrations import directory
from kfp_spot.trainer.outputs import checkpoint_root

root = "gs://my-bucket/run/checkpoints"
with CheckpointManager(root, interval="1", handle_signals=False) as ckpt:
    for step in (1, 2):
        ckpt.maybe_save(step, {"weights": b"w" * step, "progress": {"step": step}})
restored = CheckpointManager(root, handle_signals=False, record_attempts=False).restore()
src = os.path.join(sys.argv[2], "framework-files")
os.makedirs(src)
with open(os.path.join(src, "model.ckpt"), "wb") as handle:
    handle.write(b"framework")
directory.commit_directory("gs://my-bucket/run/foreign", 7, src)
found = directory.latest_directory("gs://my-bucket/run/foreign")
print(json.dumps({
    "step": restored.step,
    "weights": restored.state["weights"].decode(),
    "directory": [found.step, open(found.file("model.ckpt"), "rb").read().decode()],
    "loaded": load_checkpoint(root + "/step-1").state["progress"],
}))
"""


def test_a_gs_root_saves_and_restores_through_the_mount_without_gcsfs(tmp_path: Path) -> None:
    mount = tmp_path / "gcs"
    (mount / "my-bucket").mkdir(parents=True)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    env.pop("STORAGE_EMULATOR_HOST", None)
    proc = subprocess.run(
        [sys.executable, "-c", _ON_A_VM, str(mount), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "step": 2,
        "weights": "ww",
        "directory": [7, "framework"],
        "loaded": {"step": 1},
    }
    bucket = mount / "my-bucket" / "run"
    assert (bucket / "checkpoints" / "step-2" / "manifest.json").is_file()
    assert list((bucket / "checkpoints" / "_attempts").glob("*.json"))  # attempt records too
    assert (bucket / "foreign" / "step-7" / "model.ckpt").read_bytes() == b"framework"


@pytest.mark.parametrize(
    "given",
    [
        "gs:/my-bucket/run/checkpoints",
        "gs:my-bucket/ck",
        "gs://",
        # Other schemes were local folders "s3:", "GS:" too; "gs:///ck" names no bucket.
        "s3://my-bucket/ck",
        "GS://my-bucket/ck",
        "gcs://my-bucket/ck",
        "gs:///ck",
    ],
)
def test_a_gs_uri_missing_its_slashes_is_refused_not_written_to_a_local_gs_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    # Before: read as the relative path "gs:/...": on the VM the checkpoints went into a local
    # folder named "gs:", lost at the first preemption, so every attempt trained from step 0.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"^root: .*give gs://BUCKET/PATH or a local path"):
        CheckpointManager(given)
    with pytest.raises(ValueError, match=r"^root: "):
        directory.latest_directory(given)
    env = {"AIP_CHECKPOINT_DIR": str(tmp_path / "ck"), "AIP_MODEL_DIR": given}
    with pytest.raises(ValueError, match=r"^model directory \(--model-dir or \$AIP_MODEL_DIR\): "):
        output_dirs(environ=env)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("given", ["C:/Users/me/ckpt", "C:\\Users\\me\\ckpt", "d:ckpt"])
def test_a_windows_drive_is_a_local_path_not_a_uri_missing_its_slashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    # A laptop on Windows trains locally into C:/...: one letter and a colon is a drive.
    monkeypatch.chdir(tmp_path)
    assert fs.scheme_without_slashes(given) is None
    assert checkpoint_root(given) == os.path.abspath(given.rstrip("/"))  # relative on POSIX
    env = {"AIP_CHECKPOINT_DIR": given, "AIP_MODEL_DIR": str(tmp_path / "model")}
    assert output_dirs(environ=env).checkpoint_dir == given


@pytest.mark.parametrize("under", ["", "run/checkpoints"])
def test_a_root_that_is_or_lies_under_a_file_is_refused_before_any_save(
    tmp_path: Path, under: str
) -> None:
    """A typo'd root that names a file fails at once, naming it, not at the first save's retries."""
    afile = tmp_path / "weights.npz"
    afile.write_bytes(b"data")
    root = str(afile / under) if under else str(afile)
    with pytest.raises(ValueError, match=r"root: .*weights\.npz.* not a directory"):
        CheckpointManager(root, interval="1", handle_signals=False)
    with pytest.raises(ValueError, match=r"checkpoint directory \(--checkpoint-dir .*not a dir"):
        output_dirs(root, str(tmp_path / "model"), environ={})
    with pytest.raises(ValueError, match=r"model directory \(--model-dir .*not a directory"):
        output_dirs(str(tmp_path / "ck"), "file://" + root, environ={})
    assert afile.read_bytes() == b"data"  # nothing written over it
    # A directory still to be created, under one that exists, is fine.
    assert checkpoint_root(str(tmp_path / "new" / "ck")) == str(tmp_path / "new" / "ck")


def test_a_root_on_the_vms_disk_outside_the_jobs_checkpoint_dir_is_warned_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # `--checkpoint-dir /tmp/ckpt` in a job: the emulator's attempts all saw this machine's
    # /tmp and resumed, while on Vertex AI a preemption takes the VM's disk, and the launcher
    # and the evaluation found no checkpoint in $AIP_CHECKPOINT_DIR.
    job = tmp_path / "job" / "checkpoints"
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", f"{job}/")
    with caplog.at_level("WARNING", logger="kfp_spot.trainer"):
        for fine in (None, str(job), str(job / "sub"), f"file://{job}"):
            CheckpointManager(fine, handle_signals=False).close()
        assert caplog.records == []
        elsewhere = tmp_path / "ckpt"
        with CheckpointManager(str(elsewhere), handle_signals=False) as ckpt:
            ckpt.save(1, {"w": [1.0]})
    warned = [r.getMessage() for r in caplog.records if "VM's disk" in r.getMessage()]
    assert len(warned) == 1
    assert f"checkpoint root {elsewhere} is a folder of this VM's disk outside " in warned[0]
    assert "the next attempt resumes nothing" in warned[0]
    assert "$AIP_CHECKPOINT_DIR" in warned[0]


@pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="no sysfs to refuse a directory")
def test_a_root_no_save_could_write_is_refused_when_the_manager_starts() -> None:
    # Every save failed after its retries and maybe_save only logged it: the run trained
    # without one checkpoint. sysfs refuses a new directory even to root.
    ckpt = CheckpointManager("/sys/kfp-spot-checkpoints", handle_signals=False)
    with pytest.raises(ValueError, match=r"^root: '/sys/kfp-spot-checkpoints' cannot be created"):
        ckpt.start()
    with pytest.raises(ValueError, match="cannot be created"), ckpt:
        pass
    reader = CheckpointManager("/sys/kfp-spot-checkpoints", handle_signals=False, writer=False)
    with reader:  # a replica that only restores writes nothing
        assert reader.restore() is None


def test_starting_a_manager_leaves_no_folder_it_made_to_check_the_root(tmp_path: Path) -> None:
    root = tmp_path / "run" / "checkpoints"
    with CheckpointManager(str(root), handle_signals=False, record_attempts=False):
        assert list(tmp_path.iterdir()) == []  # the first save creates them


def test_a_pathlib_path_is_taken_as_the_path_it_is(tmp_path: Path) -> None:
    # Refused as "root must be a non-empty path or URI, got PosixPath(...)", and output_dirs
    # raised AttributeError ('PosixPath' object has no attribute 'strip') from inside.
    with CheckpointManager(tmp_path / "ck", handle_signals=False) as ckpt:
        ckpt.save(1, {"x": 1})
    assert ckpt.root == str(tmp_path / "ck")
    assert output_dirs(tmp_path / "c", tmp_path / "m") == (str(tmp_path / "c"), str(tmp_path / "m"))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "model.bin").write_bytes(b"w")
    directory.commit_directory(tmp_path / "d", 3, source=str(tmp_path / "src"))
    found = directory.latest_directory(tmp_path / "d")
    assert found is not None and found.step == 3


def test_a_relative_root_stays_where_it_was_when_the_loop_changes_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The root stayed relative: after the training code's chdir (here, before the background
    # write of step 1 even ran) steps and attempt records went to another folder, and the next
    # attempt, started where the first was, resumed from an older step or from nothing.
    (tmp_path / "run").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "run")
    with CheckpointManager("ck dir", handle_signals=False, async_save=True) as ckpt:
        assert ckpt.root == str(tmp_path / "run" / "ck dir")
        ckpt.save(1, {"x": 1})
        os.chdir(tmp_path / "elsewhere")
        ckpt.save(2, {"x": 2})
    assert list((tmp_path / "elsewhere").iterdir()) == []
    monkeypatch.chdir(tmp_path / "run")
    restored = CheckpointManager("ck dir", handle_signals=False).restore()
    assert restored is not None and restored.step == 2


def test_a_root_starting_with_a_tilde_is_in_the_home_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # "~/ckpt" made a folder literally named "~" in the working directory: the next attempt,
    # started from another directory, found none of its checkpoints.
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    with CheckpointManager("~/ckpt", handle_signals=False) as ckpt:
        assert ckpt.root == str(home / "ckpt")
        ckpt.save(1, {"x": 1})
    assert list(work.iterdir()) == []
    assert load_checkpoint("~/ckpt/step-1").state == {"x": 1}
    (home / "hf-out").mkdir()
    (home / "hf-out" / "model.bin").write_bytes(b"w")
    directory.commit_directory("~/ck-dir", 2, source="~/hf-out")  # a framework's own files
    found = directory.latest_directory("~/ck-dir")
    assert found is not None and found.path == str(home / "ck-dir" / "step-2")
    assert output_dirs("~/c", "~/m") == (str(home / "c"), str(home / "m"))
    env = {"AIP_CHECKPOINT_DIR": "~/ck", "AIP_MODEL_DIR": "~/model"}
    assert output_dirs(environ=env) == (str(home / "ck"), str(home / "model"))
    assert checkpoint_root(environ=env) == str(home / "ck")
    assert checkpoint_root("gs://b/~/ck") == "gs://b/~/ck"  # a URI's text is the object's name
    assert checkpoint_root("ck/~x") == str(work / "ck" / "~x")  # only a leading ~ is a home
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", "~/job/checkpoints/")
    with caplog.at_level("WARNING", logger="kfp_spot.trainer"):
        assert checkpoint_root("~/job/checkpoints") == str(home / "job" / "checkpoints")
    assert caplog.records == []  # the job's own directory, however it is written


def test_a_tilde_without_a_home_directory_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match=r"root: '~no-such-user-kfp/ck' starts with ~, but user"):
        checkpoint_root("~no-such-user-kfp/ck")
    with pytest.raises(ValueError, match=r"checkpoint directory \(--checkpoint-dir or"):
        output_dirs("~no-such-user-kfp/ck", "/tmp/m")
