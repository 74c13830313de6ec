"""The default images are ones Vertex AI serves, as of the tables' last review.

An end of availability is a fact of Google's list as of the day a table was compared with it
(its ``# reviewed:`` line), so these tests read that date, never today's: they fail when a table
update leaves a default behind, not when the calendar moves.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from kfp_spot import executors

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = {
    "executor_image_uri": executors.DEFAULT_EXECUTOR_IMAGE,
    "serving_container_image_uri": executors.DEFAULT_PREDICTION_IMAGE,
}


def _defaults(node: Any) -> Iterator[tuple[str, Any]]:
    """(parameter, defaultValue) of every image parameter in a compiled spec."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in DEFAULTS and isinstance(value, dict) and "defaultValue" in value:
                yield key, value["defaultValue"]
            yield from _defaults(value)
    elif isinstance(node, list):
        for item in node:
            yield from _defaults(item)


def test_every_compiled_default_image_is_the_one_default():
    # The components' and pipelines' literal defaults are the executors module's constants, so
    # the tests below hold every default a user gets.
    seen = set()
    specs = [*ROOT.glob("components/*/component.yaml"), *ROOT.glob("pipelines/*/pipeline.yaml")]
    for path in sorted(specs):
        for doc in yaml.safe_load_all(path.read_text("utf-8")):
            for name, value in _defaults(doc):
                seen.add(name)
                assert value == DEFAULTS[name], (path.relative_to(ROOT), name, value)
    assert seen == set(DEFAULTS)


def test_the_default_training_image_is_available_at_the_review_if_any_of_its_kind_is():
    reviewed = executors.table_reviewed()
    default = executors.profile(executors.DEFAULT_EXECUTOR_IMAGE)
    assert default.documented
    kin = [
        p
        for p in executors.profiles().values()
        if (p.framework, p.accelerator) == (default.framework, default.accelerator)
    ]
    available = sorted(p.image for p in kin if not p.past_availability(reviewed))
    if available:
        assert not default.past_availability(reviewed), (
            f"{default.image} is past its end of availability ({default.end_of_availability}) "
            f"at the table's review ({reviewed}); available then: {available}"
        )
        return
    # No image of its kind was available at the review (Google's list named none): the default
    # is the last of them to go, the table says so and the console shows it.
    assert default.end_of_availability == max(p.end_of_availability for p in kin)
    assert "could not be confirmed" in executors._table_text(executors.TABLE)
    notice = executors.executor_image_notice(executors.DEFAULT_EXECUTOR_IMAGE, reviewed)
    assert notice and "reached its documented end of availability" in notice


def test_the_default_prediction_image_is_available_at_the_review():
    reviewed = executors.table_reviewed(executors.PREDICTION_TABLE)
    default = executors.prediction_image(executors.DEFAULT_PREDICTION_IMAGE)
    assert default is not None and default.served_locally
    assert default.end_of_availability >= reviewed, (default.name, default.end_of_availability)
    kin = [i for i in executors.PREDICTION_IMAGES.values() if i.framework == default.framework]
    assert default.end_of_availability == max(i.end_of_availability for i in kin)
    assert executors.prediction_image_notice(executors.DEFAULT_PREDICTION_IMAGE, reviewed) is None
