"""The emulator's state dir: its exclusive lock and where things live in it.

Layout: ``emulator.sqlite`` (jobs, attempts, ledger), ``emulator.lock``, ``endpoint`` (removed
when an emulator takes the lock, written whole once it serves: a reader sees no file or the whole
line), ``logs/<job id>/attempt-<n>/<replica>.log`` and ``work/<job id>/<replica>/`` (a replica's
working dir).
"""

from __future__ import annotations

import fcntl
from pathlib import Path

from kfp_spot import fs

ENDPOINT_FILE = "endpoint"


def write_endpoint(root: Path, url: str) -> None:
    """Write the endpoint file of the state dir ``root``: a temp file renamed over it."""
    fs.atomic_write(str(Path(root) / ENDPOINT_FILE), url + "\n")


def job_log_dir(root: Path, job_id: str) -> Path:
    """The folder of a job's logs under the state dir ``root``: one folder per attempt."""
    return Path(root) / "logs" / job_id


def attempt_log_dir(root: Path, job_id: str, attempt: int) -> Path:
    """The folder of one attempt's replica logs under the state dir ``root``."""
    return job_log_dir(root, job_id) / f"attempt-{attempt}"


def saved_logs(root: Path, job_id: str) -> dict[int, list[Path]] | None:
    """Each attempt's replica log files under the state dir ``root``, by attempt number.

    Reads the files only (no lock is taken): what a stopped emulator left. None when the job has
    no log folder there.
    """
    folder = job_log_dir(root, job_id)
    if not folder.is_dir():
        return None
    numbers = sorted(int(p.name[8:]) for p in folder.glob("attempt-*") if p.name[8:].isdigit())
    return {n: sorted(attempt_log_dir(root, job_id, n).glob("*.log")) for n in numbers}


class StateDirBusyError(RuntimeError):
    """Another emulator is using the state dir."""


class StateDir:
    """A state dir held under an exclusive lock until :meth:`release`.

    Two emulators on one state dir would each take the other's running attempts for orphans, so
    a second one is refused.

    Args:
        path: the directory (created when missing).

    Raises:
        StateDirBusyError: another emulator holds the lock.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.path / "emulator.lock", "w")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise StateDirBusyError(
                f"another emulator is using the state dir {self.path}; stop it or pick another "
                "--state-dir"
            ) from None

    def forget_endpoint(self) -> None:
        """Remove the endpoint file an earlier emulator left: it names a port not served now."""
        (self.path / ENDPOINT_FILE).unlink(missing_ok=True)

    def release(self) -> None:
        """Give the state dir up (closing the file releases the lock)."""
        self._lock.close()

    @property
    def database(self) -> Path:
        """The SQLite file of jobs and attempts."""
        return self.path / "emulator.sqlite"

    def log_dir(self, job_id: str) -> Path:
        """Where the logs of a job's attempts are kept."""
        return self.path / "logs" / job_id

    def attempt_log(self, job_id: str, attempt: int, replica: str) -> Path:
        """The log file of one replica of one attempt."""
        return attempt_log_dir(self.path, job_id, attempt) / f"{replica}.log"

    def work_dir(self, job_id: str, replica: str, life: int) -> Path:
        """A replica's working directory in one life of its VM (a new VM, a new one)."""
        return self.path / "work" / job_id / f"{replica}-{life}"
