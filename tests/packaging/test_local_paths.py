"""A path of the laptop named in the job's own code is warned of: the VMs have no such file."""

from kfp_spot.packaging.localpaths import warnings_for
from tests.packaging.tiny import write_project
from tests.prepare import prepare_package

TASK = '''\
"""Trains on /Users/alice/data/train.csv by default."""
import argparse

from trainer import data


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", default="/Users/alice/data/train.csv")
    parser.add_argument("--cache", default="/root/.cache/trainer")
    print(data.load(parser.parse_args().train))
'''
DATA = """\
import pandas as pd

LABELS = f"/home/alice/labels/{'v2'}.csv"


def load(path):
    return pd.read_csv(path)
"""


def _project(tmp_path):
    (tmp_path / "src" / "trainer").mkdir(parents=True)
    (tmp_path / "src" / "trainer" / "__init__.py").write_text("")
    (tmp_path / "src" / "trainer" / "task.py").write_text(TASK)
    (tmp_path / "src" / "trainer" / "data.py").write_text(DATA)
    return tmp_path


def test_a_path_of_this_machine_is_named_with_where_the_code_names_it(tmp_path):
    found = warnings_for(_project(tmp_path), ["trainer.task", ""], home="/home/alice")
    assert found == [
        "src/trainer/task.py, line 9 names '/Users/alice/data/train.csv', a path of this "
        "machine: the training VMs on Vertex AI and the evaluation's container have no such "
        "file, so the job fails there when it reads it. Put the data in Cloud Storage and pass "
        "its gs:// URI (the VM's /gcs/BUCKET/... path for plain file I/O) as a training argument",
        found[1],
    ]
    assert found[1].startswith("src/trainer/data.py, line 3 names '/home/alice/labels/'")


def test_the_docstring_and_the_containers_own_home_are_left_alone(tmp_path):
    # The docstring names the path too; /root is the home of the job's container.
    found = warnings_for(_project(tmp_path), ["trainer.task"], home="/root")
    assert [w.split(" names ")[0] for w in found] == ["src/trainer/task.py, line 9"]


def test_prepare_package_warns_of_it(tmp_path, capfd):
    project = write_project(tmp_path / "tiny")
    (project / "tinytrainer" / "task.py").write_text(
        "import numpy as np\n\nDATA = '/Volumes/ssd/digits.npy'\nprint(np.load(DATA).shape)\n"
    )
    prepare_package(str(project), str(tmp_path / "stage"))
    assert (
        "kfp-spot: warning: tinytrainer/task.py, line 3 names '/Volumes/ssd/digits.npy', a path "
        "of this machine"
    ) in capfd.readouterr().err


def test_kfp_spot_run_warns_of_it_before_the_run(tmp_path):
    # Locally the job finds the file: said before the run, not only in the task's log after it.
    from kfp_spot.pipelines import local_run

    project = _project(tmp_path / "project")
    (project / "pyproject.toml").write_text('[tool.kfp-spot]\npython-module = "trainer.task"\n')
    (project / "src" / "trainer" / "metrics.py").write_text("REF = '/Volumes/ssd/ref.npy'\n")
    arguments = {"source": str(project), "evaluation_entry_point": "trainer.metrics:evaluate"}
    found = [w.split(" names ")[0] for w in local_run.laptop_paths(project, arguments)]
    assert found[0] == "src/trainer/task.py, line 9"
    assert "src/trainer/metrics.py, line 1" in found
    script = tmp_path / "train_digits.py"
    script.write_text("DATA = '/Users/alice/digits.npz'\n")
    assert local_run.laptop_paths(script, {"source": str(script)})[0].startswith(
        "train_digits.py, line 1 names '/Users/alice/digits.npz'"
    )


MPS_TASK = """\
import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="mps", choices=["cpu", "cuda", "mps"])
    device = torch.device(parser.parse_args().device)
    model = torch.nn.Linear(2, 1).to("mps:0")
"""


def test_apples_gpu_named_without_asking_for_it_is_warned_of(tmp_path):
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__init__.py").write_text("")
    (tmp_path / "trainer" / "task.py").write_text(MPS_TASK)
    found = warnings_for(tmp_path, ["trainer.task"], home="/root")
    assert found[0] == (
        "trainer/task.py, line 8 gives parser.add_argument() the 'mps' device, Apple's GPU, which "
        'the training VMs (Linux) do not have: PyTorch there raises "PyTorch is not linked with '
        'support for mps devices". Pick the device at run time ("cuda" if '
        'torch.cuda.is_available(), else "mps" if torch.backends.mps.is_available(), else "cpu")'
    )
    assert found[1].startswith("trainer/task.py, line 10 gives torch.nn.Linear(2, 1).to() the")
    assert len(found) == 2
    # Asked for first: the code picks another device where it has none.
    (tmp_path / "trainer" / "task.py").write_text(
        "import torch\n\n"
        "device = 'mps' if torch.backends.mps.is_available() else 'cpu'\n"
        "model = torch.nn.Linear(2, 1).to('mps' if torch.backends.mps.is_built() else device)\n"
    )
    assert warnings_for(tmp_path, ["trainer.task"], home="/root") == []


def test_a_path_under_the_home_written_with_a_tilde_is_named_too(tmp_path):
    # expanduser() finds it in this machine's home, where the emulator's job runs; a VM's home
    # is its container's, without the file. A hidden folder (a cache, a config) is made there.
    (tmp_path / "train_house.py").write_text(
        "import argparse, os\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--data', default='~/datasets/house.csv')\n"
        "CACHE = os.path.expanduser('~/.cache/house')\n"
    )
    found = warnings_for(tmp_path, ["train_house"], home="/root")
    assert [w.split(", a path")[0] for w in found] == [
        "train_house.py, line 3 names '~/datasets/house.csv'"
    ]


def test_a_file_beside_a_script_source_is_named_as_left_out(tmp_path, capfd):
    # A script is packaged alone: its house.csv is found when the emulator runs it from here.
    from kfp_spot.pipelines import local_run

    script = tmp_path / "train_house.py"
    script.write_text(
        "import os\n"
        "HERE = os.path.dirname(__file__)\n"
        "ROWS = os.path.join(HERE, 'house.csv')\n"
        "EXTRA = os.path.join(HERE, './data/extra.csv')\n"
        "MODEL = 'model.ubj'\n"
        "OUT = os.path.join(HERE, 'data/predictions.csv')\n"
        f"ODD = ['data/\\0', 'data/{'x' * 300}']\n"
    )
    (tmp_path / "house.csv").write_text("1,2\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "extra.csv").write_text("3,4\n")
    found = local_run.laptop_paths(script, {"source": str(script)})
    assert found == [
        "train_house.py, line 3 names 'house.csv', beside the script, which is packaged alone: "
        "the training VMs on Vertex AI and the evaluation's container have no such file. Make "
        "the folder a project that ships it as package data, or put the data in Cloud Storage "
        "and pass its gs:// URI as a training argument",
        found[1],
    ]
    assert found[1].startswith("train_house.py, line 4 names './data/extra.csv', beside")
    prepare_package(str(script), str(tmp_path / "stage"))  # and on the task's console
    assert found[0] in capfd.readouterr().err


def test_a_module_beside_a_script_source_that_it_imports_is_named(tmp_path):
    # train.py + helpers.py: the emulator ran it from here and found helpers; the VM would not.
    from kfp_spot.pipelines import local_run

    script = tmp_path / "fit_sib.py"
    script.write_text(
        "import json\n"
        "from helpers import make\n"
        "try:\n    import extras\nexcept ImportError:\n    extras = None\n"
    )
    (tmp_path / "helpers.py").write_text("def make():\n    return 1\n")
    (tmp_path / "extras.py").write_text("")
    assert local_run.laptop_paths(script, {"source": str(script)}) == [
        "fit_sib.py, line 2 imports helpers, a module beside the script, which is packaged "
        "alone: the job fails there with ModuleNotFoundError. Give the folder as the source, as "
        "a bare package (an __init__.py) or a project, so that the package holds both"
    ]
