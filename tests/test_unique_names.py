"""One name for one concept: no two module-level classes of kfp_spot/ share a name.

Two classes with one name (the launcher's client and the emulator's server both called
``JobService``, two ``Costs``) make an import, a log line or a traceback ambiguous. The one
exception is the framework integrations: each module of ``kfp_spot/trainer/integrations/`` offers
the same names for its framework (``SpotCheckpoint`` for Keras, for XGBoost, ...), imported as
``kfp_spot.trainer.integrations.<framework>.SpotCheckpoint``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "kfp_spot"
INTEGRATIONS = PACKAGE / "trainer" / "integrations"


def class_names(package: Path) -> dict[str, list[str]]:
    """Every module-level class name of ``package`` and the modules (paths) that define it."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                found[node.name].append(path.relative_to(package.parent).as_posix())
    return found


def allowed(modules: list[str]) -> bool:
    """Whether one name in these modules is the integrations' one-per-framework pattern."""
    integrations = INTEGRATIONS.relative_to(ROOT).as_posix() + "/"
    return all(m.startswith(integrations) for m in modules) and len(set(modules)) == len(modules)


def test_no_two_classes_of_kfp_spot_share_a_name():
    duplicates = {
        name: modules
        for name, modules in class_names(PACKAGE).items()
        if len(modules) > 1 and not allowed(modules)
    }
    assert not duplicates, "classes sharing a name:\n" + "\n".join(
        f"  {name}: {', '.join(modules)}" for name, modules in sorted(duplicates.items())
    )


def test_the_check_sees_duplicates_and_the_integrations_exception(tmp_path):
    package = tmp_path / "kfp_spot"
    (package / "a").mkdir(parents=True)
    (package / "a" / "one.py").write_text("class Costs:\n    pass\n")
    (package / "two.py").write_text("class Costs:\n    pass\n\n\ndef f():\n    class Inner: ...\n")
    names = class_names(package)
    assert len(names["Costs"]) == 2 and "Inner" not in names  # module level only
    assert allowed(
        ["kfp_spot/trainer/integrations/keras.py", "kfp_spot/trainer/integrations/xgboost.py"]
    )
    assert not allowed(["kfp_spot/trainer/integrations/keras.py", "kfp_spot/trainer/manager.py"])
