"""A job using a NumPy, scikit-learn, SciPy or pandas name its image lacks is warned of first.

Locally the emulator and the import check run the job with this machine's NumPy (2.x),
scikit-learn (1.9) and SciPy (1.17), and a laptop's pandas is often 3.x; the default image has
NumPy 1.26.4, scikit-learn 1.6.1, SciPy 1.15.2 and pandas 2.2.3, where ``np.trapezoid`` or
``pd.col`` is an AttributeError and ``log_loss(y, y_proba=p)`` or ``linregress(x, y, axis=0)`` a
TypeError on Vertex AI.
"""

import importlib
import inspect
import re
from pathlib import Path

import numpy as np
import pytest
from packaging.version import Version

from kfp_spot import executors
from kfp_spot.packaging import imagepins, newnames, prepare_package
from kfp_spot.packaging.jobsource import JobSource
from kfp_spot.packaging.libnames import LIBRARIES, NUMPY, PANDAS, SCIKIT_LEARN, SCIPY
from tests.packaging.tiny import write_project

DEFAULT = executors.profile(executors.DEFAULT_EXECUTOR_IMAGE)
MODULE = "tinytrainer.task"


def _warnings(
    tmp_path: Path, task: str, image: executors.ExecutorProfile = DEFAULT, requirements=()
) -> list[str]:
    source = JobSource(write_project(tmp_path / "p", task=task))
    assert source.reached(MODULE)  # parsed: no case passes unread
    return newnames.warnings_for(source, [MODULE], image, list(requirements))


def _assert_one_warning(tmp_path, task, library, held, shown, release, error) -> None:
    """The task's one warning names its last line's use, the release, the error and the fix."""
    (warning,) = _warnings(tmp_path, task)
    line, title = len(task.splitlines()), library.title
    start = (
        f"tinytrainer/task.py uses {title} names that executor image sklearn-cpu.1-6's "
        f"{title} {held} lacks (line {line}: {shown} ({title} {release}"
    )
    assert warning.startswith(start) and warning[len(start)] in ");", warning  # ; before it ...
    assert f"): on Vertex AI the job fails with {error} when it gets there" in warning
    needed = release.removesuffix(".0")  # pandas>=3, as the NumPy warning says numpy>=2
    assert warning.endswith(
        f"Use what {title} {held} has, or declare {library.distribution}>={needed} in the "
        f"package's dependencies (pip then installs a {title} {needed} at every job start)"
    )


def test_the_default_image_pins_the_releases_the_tables_start_at():
    assert imagepins.pinned_version(DEFAULT, "numpy") == Version("1.26.4")
    assert imagepins.pinned_version(DEFAULT, "scikit-learn") == Version("1.6.1")
    assert imagepins.pinned_version(DEFAULT, "scipy") == Version("1.15.2")
    assert imagepins.pinned_version(DEFAULT, "pandas") == Version("2.2.3")


def test_every_listed_name_is_numpys_from_the_version_given():
    # This machine's NumPy has each name of the table it is new enough for: no misspelt entry.
    here = Version(np.__version__)
    for dotted, since in NUMPY.names.items():
        if here.release[:2] < since:
            continue
        module, _, name = dotted.rpartition(".")
        target = np
        for part in module.split(".")[1:]:
            target = getattr(target, part)
        assert hasattr(target, name), dotted
    _older_names_are_of_the_table(NUMPY)


def _older_names_are_of_the_table(library) -> None:
    keywords = {f"{c}({k}=)" for c, added in library.keywords.items() for k in added}
    assert set(library.older) <= set(library.names) | keywords


def test_every_listed_numpy_keyword_is_taken_by_this_machines_numpy():
    # Called with the keyword alone, a callable that lacks it says "unexpected keyword argument"
    # before anything else (as NumPy 1.26 does for each, which is how the table was read).
    here = Version(np.__version__).release[:2]
    for dotted, added in NUMPY.keywords.items():
        module, _, name = dotted.rpartition(".")
        function = getattr(importlib.import_module(module), name)
        for keyword, since in added.items():
            if here < since:
                continue
            try:
                function(**{keyword: None})
            except TypeError as exc:
                assert "keyword" not in str(exc), (dotted, keyword, exc)
            except (ValueError, AttributeError, OverflowError):
                pass  # the keyword was taken; None is no value for it


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
        ("from numpy.strings import upper\n", "np.strings", 1),
        ("import numpy as np\nu = np.unique([2, 1], sorted=False)\n", "np.unique(sorted=...)", 2),
        ("from numpy import sort\ns = sort([2, 1], stable=True)\n", "np.sort(stable=...)", 2),
        ("import numpy.strings.foo\n", "np.strings", 1),
    ],
)
def test_a_name_the_images_numpy_lacks_is_named_with_its_line(tmp_path, task, shown, line):
    (warning,) = _warnings(tmp_path, task)
    assert warning.startswith(
        "tinytrainer/task.py uses NumPy names that executor image sklearn-cpu.1-6's NumPy 1.26.4 "
        f"lacks (line {line}: {shown} (NumPy 2."
    )
    error = "ImportError" if "import" in task.splitlines()[line - 1] else "AttributeError"
    error = "TypeError" if "(" in shown else error
    assert f"on Vertex AI the job fails with {error} when it gets there" in warning
    assert re.search(
        r"Use what NumPy 1\.26\.4 has, or declare numpy>=(2|2\.[123]) in the package's "
        r"dependencies \(pip then installs a NumPy \1 at every job start\)$",
        warning,
    )


def test_each_name_is_shown_once_at_its_first_line_with_the_older_name(tmp_path):
    task = (
        "import numpy as np\n"
        "a = np.concat([[1], [2]])\n"
        "b = np.trapezoid([1, 2])\n"
        "c = np.concat([[3], [4]])\n"
        "d = np.reshape(a, shape=(2,))\n"
    )
    (warning,) = _warnings(tmp_path, task)
    assert (
        "(line 2: np.concat (NumPy 2.0; before it np.concatenate); "
        "line 3: np.trapezoid (NumPy 2.0; before it np.trapz); "
        "line 5: np.reshape(shape=...) (NumPy 2.1; before it newshape=))"
    ) in warning
    assert "fails with AttributeError or TypeError when" in warning


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
        # NumPy 1.26's keywords, and another library's sort
        "import numpy as np\ns = np.sort([2, 1], kind='stable'), np.std([1], ddof=1)\n",
        "import torch\ns = torch.sort(torch.ones(2), stable=True)\n",
        "x = [1, 2]\ny = x.astype\n",  # an attribute of anything else
        # JAX's NumPy has the array API names; it is not the image's NumPy
        "import jax.numpy as jnp\nfrom jax import numpy as np\nx = jnp.concat([]), np.pow(2, 2)\n",
    ],
)
def test_guarded_older_and_other_libraries_names_are_left_alone(tmp_path, task):
    assert _warnings(tmp_path, task) == []


def test_an_image_without_a_numpy_pin_or_a_declared_numpy_2_is_left_alone(tmp_path):
    task = "import numpy as np\ny = np.trapezoid([1, 2])\n"
    unpinned = next(
        p for p in executors.profiles().values() if imagepins.pinned_version(p, "numpy") is None
    )
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


def test_kfp_spots_trainer_uses_nothing_the_default_images_libraries_lack():
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
        for library in LIBRARIES:
            if uses := newnames.uses_in(file, library):
                found[where] = uses
    assert found == {}


def _library_object(dotted: str):
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except AttributeError:
        return importlib.import_module(dotted)  # a module new in its parent


@pytest.mark.parametrize("library", [SCIKIT_LEARN, SCIPY, PANDAS], ids=lambda lib: lib.distribution)
def test_every_listed_name_and_keyword_is_this_machines(library):
    _older_names_are_of_the_table(library)
    # This machine's library has each name and keyword of the table it is new enough for: no
    # misspelt entry, no keyword of another callable. (The table's releases were read from the
    # wheels; SciPy's keywords by calling each callable with data on each release, since its
    # decorators make a signature mislead: 1.15 takes kmeans(seed=), which its signature lacks.)
    here = Version(pytest.importorskip(library.root).__version__).release[:2]
    for dotted, since in library.names.items():
        if here >= since:
            assert _library_object(dotted) is not None, dotted
    for dotted, added in library.keywords.items():
        parameters = inspect.signature(_library_object(dotted)).parameters
        for keyword, since in added.items():
            if here >= since:
                assert keyword in parameters, (dotted, keyword)


@pytest.mark.parametrize(
    ("task", "shown", "release", "error"),
    [
        (
            "from sklearn.metrics import d2_brier_score\n",
            "sklearn.metrics.d2_brier_score",
            "1.8",
            "ImportError",
        ),
        (
            "import sklearn.metrics as skm\ns = skm.d2_brier_score([1], [0.5])\n",
            "sklearn.metrics.d2_brier_score",
            "1.8",
            "AttributeError",
        ),
        ("import sklearn.callback\n", "sklearn.callback", "1.9", "ImportError"),
        ("from sklearn.callback import x\n", "sklearn.callback", "1.9", "ImportError"),
        (
            "from sklearn.metrics import log_loss\n\n\ndef score(y, p):\n"
            "    return log_loss(y, y_proba=p)\n",
            "sklearn.metrics.log_loss(y_proba=...)",
            "1.9",
            "TypeError",
        ),
        (
            "from sklearn import linear_model as lm\nm = lm.LinearRegression(tol=1e-6)\n",
            "sklearn.linear_model.LinearRegression(tol=...)",
            "1.7",
            "TypeError",
        ),
    ],
)
def test_a_scikit_learn_name_or_keyword_the_images_lacks_is_named(
    tmp_path, task, shown, release, error
):
    _assert_one_warning(tmp_path, task, SCIKIT_LEARN, "1.6.1", shown, release, error)


def test_numpy_and_scikit_learn_are_one_warning_each_with_every_kind_of_error(tmp_path):
    task = (
        "import numpy as np\n"
        "from sklearn.metrics import brier_score_loss, d2_brier_score\n"
        "from sklearn.linear_model import LinearRegression\n"
        "a = np.concat([[1], [2]])\n"
        "b = brier_score_loss([1], [0.5], scale_by_half=True)\n"
        "c = LinearRegression(fit_intercept=False, tol=0.1)\n"
    )
    numpy_warning, sklearn_warning = _warnings(tmp_path, task)
    assert "(line 4: np.concat (NumPy 2.0; before it np.concatenate))" in numpy_warning
    assert (
        "(line 2: sklearn.metrics.d2_brier_score (scikit-learn 1.8); "
        "line 5: sklearn.metrics.brier_score_loss(scale_by_half=...) (scikit-learn 1.7); "
        "line 6: sklearn.linear_model.LinearRegression(tol=...) (scikit-learn 1.7))"
    ) in sklearn_warning
    assert "fails with ImportError or TypeError when" in sklearn_warning
    assert "declare scikit-learn>=1.8 in" in sklearn_warning


@pytest.mark.parametrize(
    "task",
    [
        # what 1.6.1 has: its names and keywords
        "from sklearn.metrics import log_loss\nx = log_loss([1], [[0.5, 0.5]], labels=[0, 1])\n",
        "from sklearn.linear_model import LinearRegression\nm = LinearRegression(n_jobs=2)\n",
        "import sklearn\nfrom sklearn.model_selection import GridSearchCV\n",
        # guarded
        "from sklearn.metrics import log_loss\ntry:\n    x = log_loss([1], y_proba=[[1]])\n"
        "except TypeError:\n    x = log_loss([1], [[1]])\n",
        "import sklearn\nif sklearn.__version__ >= '1.8':\n"
        "    from sklearn.metrics import d2_brier_score\n",
        # another library's keyword of the same name, and a callable not resolved
        "from mylib import log_loss\nx = log_loss(y_proba=1)\n",
        "import sklearn.metrics as m\nf = m.__dict__['log_loss']\nx = f(y_proba=1)\n",
    ],
)
def test_what_scikit_learn_1_6_has_or_a_guard_skips_is_left_alone(tmp_path, task):
    assert _warnings(tmp_path, task) == []


@pytest.mark.parametrize(
    ("task", "shown"),
    [
        (
            "import numpy as np\ntry:\n    f = np.trapezoid\nexcept ImportError:\n    f = None\n",
            "np.trapezoid",
        ),
        (
            "try:\n    from numpy import concat\nexcept AttributeError:\n    concat = None\n",
            "np.concat",
        ),
        (
            "import numpy as np\ntry:\n    u = np.unique([1], sorted=False)\n"
            "except (ImportError, AttributeError):\n    u = None\n",
            "np.unique(sorted=...)",
        ),
    ],
)
def test_a_try_guards_only_the_uses_whose_error_it_catches(tmp_path, task, shown):
    (warning,) = _warnings(tmp_path, task)
    assert f": {shown} (NumPy 2." in warning


def test_an_image_without_a_scikit_learn_pin_or_a_declared_newer_one_is_left_alone(tmp_path):
    task = "from sklearn.metrics import d2_brier_score\n"
    tensorflow = executors.profile("us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest")
    assert imagepins.pinned_version(tensorflow, "scikit-learn") is None
    assert _warnings(tmp_path / "a", task, image=tensorflow) == []
    assert _warnings(tmp_path / "b", task, requirements=["scikit-learn>=1.8"]) == []
    assert _warnings(tmp_path / "c", task, requirements=["scikit-learn>=1.5"]) != []


def test_prepare_package_warns_of_a_scikit_learn_keyword(tmp_path, capsys):
    task = "from sklearn.metrics import log_loss\n\nLOSS = log_loss([0, 1], y_proba=[0.2, 0.9])\n"
    project = write_project(tmp_path / "src", task=task)
    prepare_package(str(project), str(tmp_path / "stage"), python_module=MODULE)
    assert (
        "kfp-spot: warning: tinytrainer/task.py uses scikit-learn names that executor image "
        "sklearn-cpu.1-6's scikit-learn 1.6.1 lacks (line 3: "
        "sklearn.metrics.log_loss(y_proba=...) (scikit-learn 1.9; before it y_pred=))"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("task", "shown", "release", "error"),
    [
        ("from scipy.stats import quantile\n", "scipy.stats.quantile", "1.16", "ImportError"),
        (
            "import scipy.sparse as sp\nm = sp.swapaxes(sp.eye_array(2), 0, 1)\n",
            "scipy.sparse.swapaxes",
            "1.17",
            "AttributeError",
        ),
        (
            "import scipy.stats as st\n\n\ndef slope(x, y):\n"
            "    return st.linregress(x, y, axis=0).slope\n",
            "scipy.stats.linregress(axis=...)",
            "1.16",
            "TypeError",
        ),
        (
            "from scipy import linalg\nA = linalg.inv([[2.0]], assume_a='pos')\n",
            "scipy.linalg.inv(assume_a=...)",
            "1.17",
            "TypeError",
        ),
        (
            "from scipy.signal import windows\nw = windows.hann(8, xp=None)\n",
            "scipy.signal.windows.hann(xp=...)",
            "1.16",
            "TypeError",
        ),
    ],
)
def test_a_scipy_name_or_keyword_the_images_lacks_is_named(tmp_path, task, shown, release, error):
    _assert_one_warning(tmp_path, task, SCIPY, "1.15.2", shown, release, error)


@pytest.mark.parametrize(
    "task",
    [
        # what 1.15.2 takes, though its signature of kmeans lacks seed= (a decorator takes it)
        "from scipy.cluster.vq import kmeans\nc = kmeans([[1.0], [2.0]], 1, seed=0)\n",
        "import scipy.stats as st\nr = st.linregress([1, 2, 3], [2, 4, 7])\n",
        "from scipy import stats\nt = stats.kendalltau([1, 2], [2, 1], nan_policy='omit')\n",
        "from scipy.special import expit, logsumexp\n",
        # what a declared newer SciPy brings is the next test's; this is another library's
        "import numpy as np\nq = np.quantile([1, 2], 0.5)\n",
    ],
)
def test_what_scipy_1_15_has_is_left_alone(tmp_path, task):
    assert _warnings(tmp_path, task) == []


def test_a_declared_newer_scipy_is_left_alone(tmp_path):
    task = "from scipy.stats import quantile\n"
    assert _warnings(tmp_path / "a", task, requirements=["scipy>=1.16"]) == []
    assert _warnings(tmp_path / "b", task, requirements=["scipy>=1.10"]) != []


@pytest.mark.parametrize(
    ("task", "shown", "release", "error"),
    [
        (
            "import pandas as pd\n\n\ndef add(df):\n    return df.assign(z=pd.col('x') + 1)\n",
            "pd.col",
            "3.0",
            "AttributeError",
        ),
        ("from pandas import col\n", "pd.col", "3.0", "ImportError"),
        (
            "import pandas as pd\nframe = pd.DataFrame.from_arrow(table)\n",
            "pd.DataFrame.from_arrow",
            "3.0",
            "AttributeError",
        ),
        (
            "from pandas import DataFrame\nframe = DataFrame.from_arrow(table)\n",
            "pd.DataFrame.from_arrow",
            "3.0",
            "AttributeError",
        ),
        (
            "import pandas as pd\ns = pd.StringDtype(na_value=float('nan'))\n",
            "pd.StringDtype(na_value=...)",
            "2.3",
            "TypeError",
        ),
        (
            "import pandas as pd\nc = pd.concat([a, b], union_categories=True)\n",
            "pd.concat(union_categories=...)",
            "3.1",
            "TypeError",
        ),
    ],
)
def test_a_pandas_name_or_keyword_the_images_lacks_is_named(tmp_path, task, shown, release, error):
    _assert_one_warning(tmp_path, task, PANDAS, "2.2.3", shown, release, error)


def test_a_renamed_pandas_name_gives_the_images_spelling(tmp_path):
    task = "from pandas.api.typing import RollingGroupBy\n"
    (warning,) = _warnings(tmp_path, task)
    assert "(line 1: pd.api.typing.RollingGroupBy (pandas 3.1; before it " in warning
    assert "pd.api.typing.RollingGroupby))" in warning


@pytest.mark.parametrize(
    "task",
    [
        # what pandas 2.2.3 has; a frame's own method is not read (its type is not known)
        "import pandas as pd\nframe = pd.concat([pd.DataFrame({'x': [1]})], ignore_index=True)\n",
        "from pandas.api.typing import RollingGroupby\n",
        "import pandas as pd\n\n\ndef pick(df):\n    return df.select('x')\n",
        # Polars has a col of its own
        "import polars as pl\ne = pl.col('x')\n",
    ],
)
def test_what_pandas_2_2_has_is_left_alone(tmp_path, task):
    assert _warnings(tmp_path, task) == []
