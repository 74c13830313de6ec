"""Run launch_spot_job in its own process (for signal and crash tests): argv[1] is a JSON dict of
inputs; artifacts are given as {"uri": ...} and printed back as JSON on success."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from kfp_spot.jobs import entry
from kfp_spot.jobs.entry import launch_spot_job


@dataclass
class Art:
    uri: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    path: str = ""


def main() -> None:
    inputs = json.loads(sys.argv[1])
    for name in ("package", "resume_from", "checkpoint", "model", "job_report"):
        if isinstance(inputs.get(name), dict):
            inputs[name] = Art(**inputs[name])
    cancel_wait = inputs.pop("_cancel_wait_seconds", None)  # not an input: the backend's own
    if cancel_wait is not None:
        original = entry.build_request
        entry.build_request = lambda **given: replace(
            original(**given), cancel_wait_seconds=cancel_wait
        )
    outcome = launch_spot_job(**inputs)
    arts = {k: asdict(v) for k, v in inputs.items() if isinstance(v, Art)}
    print(json.dumps({"outcome": outcome, "artifacts": arts}))


if __name__ == "__main__":
    main()
