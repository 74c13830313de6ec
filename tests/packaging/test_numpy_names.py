"""A job using a NumPy name its executor image's NumPy lacks is warned of before it runs.

Locally the emulator and the import check run the job with this machine's NumPy (2.x); the
default image has NumPy 1.26.4, where ``np.trapezoid`` is an AttributeError on Vertex AI.
"""

from pathlib import Path

import numpy as np
import pytest
from packaging.version import Version

from kfp_spot import executors
from kfp_spot.packaging import numpynames, prepare_package
from kfp_spot.packaging.jobsource import JobSource
from tests.packaging.tiny import write_project

DEFAULT = executors.profile(executors.DEFAULT_EXECUTOR_IMAGE)
MODULE = "tinytrainer.task"


def _warnings(
    tmp_path: Path, task: str, image: executors.ExecutorProfile = DEFAULT, requirements=()
) -> list[str]:
    source = JobSource(write_project(tmp_path / "p", task=task))
    assert source.reached(MODULE)  # parsed: no case passes unread
    return numpynames.warnings_for(source, [MODULE], image, list(requirements))


def test_the_default_image_pins_numpy_1():
    assert numpynames.image_numpy(DEFAULT) == Version("1.26.4")


def test_every_listed_name_is_numpys_from_the_version_given():
    # This machine's NumPy has each name of the table it is new enough for: no misspelt entry.
    here = Version(np.__version__)
    for dotted, since in numpynames.NEW_NAMES.items():
        if here.release[:2] < since:
            continue
        module, _, name = dotted.rpartition(".")
        target = np
        for part in module.split(".")[1:]:
            target = getattr(target, part)
        assert hasattr(target, name), dotted
    assert set(numpynames.OLDER_NAMES) <= set(numpynames.NEW_NAMES)


@pytest.mark.parametrize(
    ("task", "shown", "line"),
    [
        ("import numpy as np\n\n\ndef area(y):\n    return np.trapezoid(y)\n", "np.trapezoid", 5),
        ("from numpy import concat\n", "np.concat", 1),
        ("import numpy\nx = numpy.linalg.vector_norm([3, 4])\n", "np.linalg.vector_norm", 2),
        ("import numpy.strings\n", "np.strings", 1),
        ("from numpy import linalg as la\nn = la.matrix_norm([[1]])\n", "np.linalg.matrix_norm", 2),
        ("import numpy as np\nmask = np.zeros(3, dtype=np.bool)\n", "np.bool", 2),
        ("import numpy as np\ns = np.cumulative_sum([1, 2])\n", "np.cumulative_sum", 2),
    ],
)
def test_a_name_the_images_numpy_lacks_is_named_with_its_line(tmp_path, task, shown, line):
    (warning,) = _warnings(tmp_path, task)
    assert warning.startswith(
        "tinytrainer/task.py uses NumPy names that executor image sklearn-cpu.1-6's NumPy 1.26.4 "
        f"lacks (line {line}: {shown} (NumPy 2."
    )
    assert "on Vertex AI the job fails with AttributeError when it gets there" in warning
    assert warning.endswith(
        "or declare numpy>=2 in the package's dependencies (pip then "
        "installs a NumPy 2 at every job start)"
    )


def test_each_name_is_shown_once_at_its_first_line_with_the_older_name(tmp_path):
    task = (
        "import numpy as np\n"
        "a = np.concat([[1], [2]])\n"
        "b = np.trapezoid([1, 2])\n"
        "c = np.concat([[3], [4]])\n"
    )
    (warning,) = _warnings(tmp_path, task)
    assert (
        "(line 2: np.concat (NumPy 2.0; before it np.concatenate); "
        "line 3: np.trapezoid (NumPy 2.0; before it np.trapz))"
    ) in warning


@pytest.mark.parametrize(
    "task",
    [
        "import numpy as np\nx = np.concatenate([[1]]) + np.trapz([1, 2])\n",  # older names
        "import pandas as pd\nimport torch\nx = pd.concat([]), torch.concat([])\n",  # not NumPy's
        "import numpy as np\nf = np.trapezoid if hasattr(np, 'trapezoid') else np.trapz\n",
        "import numpy as np\nif np.__version__ >= '2':\n    f = np.trapezoid\nelse:\n"
        "    f = np.trapz\n",
        "import numpy as np\ntry:\n    f = np.trapezoid\nexcept AttributeError:\n"
        "    f = np.trapz\n",
        "try:\n    from numpy import trapezoid\nexcept ImportError:\n"
        "    from numpy import trapz as trapezoid\n",
        "import numpy as np\nf = hasattr(np, 'trapezoid') and np.trapezoid\n",
        "import numpy as np\nf = getattr(np, 'trapezoid', None)\n",
        "x = [1, 2]\ny = x.astype\n",  # an attribute of anything else
        # JAX's NumPy has the array API names; it is not the image's NumPy
        "import jax.numpy as jnp\nfrom jax import numpy as np\nx = jnp.concat([]), np.pow(2, 2)\n",
    ],
)
def test_guarded_older_and_other_libraries_names_are_left_alone(tmp_path, task):
    assert _warnings(tmp_path, task) == []


def test_an_image_without_a_numpy_pin_or_a_declared_numpy_2_is_left_alone(tmp_path):
    task = "import numpy as np\ny = np.trapezoid([1, 2])\n"
    unpinned = next(p for p in executors.profiles().values() if numpynames.image_numpy(p) is None)
    assert _warnings(tmp_path / "a", task, image=unpinned) == []
    # pip replaces the image's NumPy on the VM (the image-pin warning says so)
    assert _warnings(tmp_path / "b", task, requirements=["numpy>=2"]) == []
    assert _warnings(tmp_path / "c", task, requirements=["numpy>=1.20"]) != []


def test_a_deeply_nested_expression_is_read_without_recursion(tmp_path):
    # 2000 terms parse (and import) but nest deeper than Python's recursion limit
    task = "import numpy as np\nx = " + " + ".join(["1"] * 2000) + " + np.concat([[1]])\n"
    (warning,) = _warnings(tmp_path, task)
    assert "line 2: np.concat" in warning


def test_prepare_package_warns_of_it(tmp_path, capsys):
    project = write_project(
        tmp_path / "src", task="import numpy as np\n\nAREA = np.trapezoid([1.0, 2.0])\n"
    )
    prepare_package(str(project), str(tmp_path / "stage"), python_module=MODULE)
    assert (
        "kfp-spot: warning: tinytrainer/task.py uses NumPy names that executor image "
        "sklearn-cpu.1-6's NumPy 1.26.4 lacks (line 3: np.trapezoid" in capsys.readouterr().err
    )


def test_kfp_spots_trainer_uses_no_name_the_default_images_numpy_lacks():
    # The light kfp-spot-trainer wheel runs on the VM beside the job, with the image's NumPy
    # (1.26.4): its modules are held to the rule prepare_package applies to a job's code.
    from kfp_spot.packaging import imports, trainer_dist
    from kfp_spot.packaging.jobsource import SourceFile

    files = {k: v for k, v in trainer_dist.contents().files.items() if k.endswith(".py")}
    assert "kfp_spot/trainer/__init__.py" in files
    found = {}
    for where, path in files.items():
        tree = imports.source_tree(path, where)
        assert tree is not None, where
        file = SourceFile(module=where, path=path, where=where, tree=tree, imported=())
        if names := numpynames.new_names_in(file):
            found[where] = names
    assert found == {}
