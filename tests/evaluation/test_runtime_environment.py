"""The evaluation sees what kfp-spot's runtime image holds, as on Vertex AI, not this machine.

On Vertex AI, evaluate_checkpoint runs in the runtime image (kfp-spot and its dependencies) and
installs the package with what it declares. An evaluation module importing a library the package
does not declare (scikit-learn, which the training's executor image has) fails there after a
whole paid training; locally it must fail the same way, naming the library and the fix.
"""

import pytest

from kfp_spot.evaluation import EvaluationInputError, evaluate
from kfp_spot.packaging import prepare_package
from tests.evaluation.conftest import write_checkpoint
from tests.packaging.tiny import EVALUATE, PYPROJECT, write_project

ENTRY = "tinytrainer.evaluate:evaluate"
USES_SKLEARN = EVALUATE.replace("import numpy as np\n", "import numpy as np\nimport sklearn\n")


def _staged(tmp_path, pyproject):
    project = write_project(tmp_path / "src", evaluate=USES_SKLEARN)
    (project / "pyproject.toml").write_text(pyproject)
    return prepare_package(str(project), str(tmp_path / "stage"))


def test_an_undeclared_import_fails_naming_it_and_the_fix(tmp_path, env_cache):
    pytest.importorskip("sklearn")  # on this machine: the host's libraries must not leak in
    info = _staged(tmp_path, PYPROJECT)
    write_checkpoint(tmp_path / "ckpt", 10, 0.9)
    with pytest.raises(EvaluationInputError) as caught:
        evaluate(
            str(tmp_path / "ckpt"), list(info.package_uris), entry_point=ENTRY, cache_dir=env_cache
        )
    message = str(caught.value)
    assert message.startswith("entry_point: cannot import module 'tinytrainer.evaluate'")
    assert "No module named 'sklearn'" in message
    assert "imports 'sklearn'" in message
    assert "declare it in the package's dependencies" in message


def test_the_same_import_declared_is_evaluated(tmp_path, env_cache):
    pytest.importorskip("sklearn")
    declared = PYPROJECT.replace('["numpy>=1.20"]', '["numpy>=1.20", "scikit-learn"]')
    info = _staged(tmp_path, declared)
    write_checkpoint(tmp_path / "ckpt", 10, 0.9)
    result = evaluate(
        str(tmp_path / "ckpt"), list(info.package_uris), entry_point=ENTRY, cache_dir=env_cache
    )
    assert result.step == 10
    assert result.metrics["accuracy"] == pytest.approx(0.9)
