"""One local run, three reports, one set of numbers.

`kfp-spot run`'s code path (``local_run.run_local``) with a Spot preemption (the drill) and an
emulator restart mid-run (stopped and started again on the same state dir and port while the
launcher waits; it rides the outage out with its retry budget). The launch task's ``job_report``,
``report.md`` and the printed summary must give the same attempts, preemptions, billable seconds
and costs: they all come from ``kfp_spot.accounting``.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator

import pytest

from kfp_spot import checkpoints
from kfp_spot.pipelines import local_run

pytestmark = pytest.mark.slow


class RestartMidRun:
    """Restart the emulator once the attempt after the drill's preemption committed a step."""

    def __init__(self, emu, checkpoint_root: str, timeout: float = 300.0):
        self.emu = emu
        self.root = checkpoint_root
        self.timeout = timeout
        self.restarted_at_step: int | None = None
        self.error: Exception | None = None
        self._stop = threading.Event()

    def _ready(self, baseline: dict[str, int]) -> bool:
        for job in self.emu.list_jobs():
            rows = self.emu.attempts(job["name"])
            # Attempt 1 was preempted by the drill; attempt 2 is running.
            if len(rows) != 2 or rows[0]["endReason"] != "PREEMPTED" or rows[1]["endTime"]:
                continue
            latest = checkpoints.latest(self.root, check_hashes=False)
            step = latest.step if latest else -1
            baseline.setdefault(job["name"], step)
            if step > baseline[job["name"]]:
                self.restarted_at_step = step
                return True
        return False

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout
        baseline: dict[str, int] = {}
        try:
            while not self._stop.wait(0.1) and time.monotonic() < deadline:
                if self._ready(baseline):
                    port = self.emu.port
                    self.emu.stop()  # the running attempt ends EMULATOR_RESTARTED
                    self.emu.start()  # same state dir, same port: the job carries on
                    assert self.emu.port == port
                    return
        except Exception as exc:  # noqa: BLE001 - re-raised by the test, not lost in a thread
            self.error = exc

    @contextlib.contextmanager
    def __call__(self) -> Iterator[RestartMidRun]:
        thread = threading.Thread(target=self._run, name="restart-emulator", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(timeout=60)


def _md(markdown: str, label: str) -> str:
    match = re.search(rf"^\| {re.escape(label)} \| (.*) \|$", markdown, re.MULTILINE)
    assert match, f"no row {label!r} in report.md"
    return match.group(1)


def _printed(text: str, label: str) -> str:
    match = re.search(rf"^{re.escape(label)}:\s+(.*)$", text, re.MULTILINE)
    assert match, f"no line {label!r} in:\n{text}"
    return match.group(1)


def _dollars(text: str) -> list[str]:
    return re.findall(r"\$[\d,]+\.\d{6}", text)


@pytest.fixture(scope="module")
def disrupted_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    restarts: list[RestartMidRun] = []

    def disruption(emu, checkpoint_root):
        restarts.append(RestartMidRun(emu, checkpoint_root))
        return restarts[-1]()

    result = local_run.run_local(
        run_dir, preemptions=1, grace_period=5.0, progress=print, disruption=disruption
    )
    (restart,) = restarts
    if restart.error is not None:
        raise restart.error
    return run_dir, result, restart


def test_the_run_rode_out_a_preemption_and_an_emulator_restart(disrupted_run):
    _, result, restart = disrupted_run
    assert restart.restarted_at_step is not None, "the emulator was never restarted"
    assert result.outcome == "SUCCEEDED"
    assert len(result.job_names) == 1  # the launcher rode it out: no resubmission
    reasons = [row["endReason"] for row in result.ledger]
    assert reasons == ["PREEMPTED", "EMULATOR_RESTARTED", "SUCCEEDED"]
    assert min(result.resumed_from_steps) > 0


def test_job_report_report_md_and_the_printout_agree(disrupted_run):
    run_dir, result, _ = disrupted_run
    (report_file,) = (run_dir / "pipeline_root").glob("*/launch-spot-job/job_report")
    job_report = json.loads(report_file.read_text())
    metrics, numbers = job_report["metrics"], job_report["summary"]
    markdown = (run_dir / "report.md").read_text()
    printed = local_run.summarize(result)

    # Attempts and preemptions: an emulator restart counts as one, everywhere.
    assert metrics["attempts"] == 3
    assert int(_md(markdown, "Attempts")) == 3
    assert int(_printed(printed, "attempts")) == 3
    assert metrics["preemptions"] == 2
    assert _md(markdown, "Preemptions") == "2 (1 of them emulator restarts)"
    assert _printed(printed, "preemptions") == "2 (1 of them emulator restarts)"

    # Billable seconds.
    billable = f"{numbers['billable_seconds']:.1f}"
    assert metrics["billable_seconds"] == pytest.approx(numbers["billable_seconds"], abs=1e-3)
    assert _md(markdown, "Billable time") == f"{billable} s"
    assert _printed(printed, "billable time") == f"{billable} s"

    # Costs: what was paid (an estimate, with its 60-91% range), on demand, savings.
    paid, low, high = numbers["cost_usd"], *numbers["cost_usd_range"]
    on_demand, savings = numbers["cost_on_demand_usd"], numbers["savings_usd"]
    assert metrics["cost_spot_usd"] == pytest.approx(paid, abs=1e-9)
    assert metrics["cost_on_demand_usd"] == pytest.approx(on_demand, abs=1e-9)
    assert metrics["savings_usd"] == pytest.approx(savings, abs=1e-9)
    assert (metrics["cost_spot_usd_low"], metrics["cost_spot_usd_high"]) == pytest.approx(
        (low, high), abs=1e-9
    )
    figures = [f"${v:,.6f}" for v in (paid, low, high, on_demand, savings)]
    assert _md(markdown, "Cost (what the run paid)") == figures[0]
    assert _md(markdown, "Cost range at 60-91% Spot discounts") == f"{figures[1]} to {figures[2]}"
    assert _md(markdown, "On-demand cost (same time)") == figures[3]
    assert _md(markdown, "Savings").startswith(figures[4])
    assert _dollars(_printed(printed, "cost")) == figures
    assert 0 < paid < on_demand

    # And the ledger the emulator billed is what all three summed.
    assert numbers["cost_usd"] == pytest.approx(sum(r["cost"] for r in result.ledger), abs=1e-9)
    assert numbers["billable_seconds"] == pytest.approx(
        sum(r["billableSeconds"] for r in result.ledger), abs=1e-6
    )
