"""``kfp-spot emulator ...``: the local Vertex AI training emulator.

``start`` serves in the foreground until SIGINT, SIGTERM or SIGHUP and prints its endpoint once it
accepts requests; ``preempt``, ``logs``, ``attempts`` and ``jobs`` talk to a running emulator over
HTTP, found through ``--endpoint`` (or ``$KFP_SPOT_EMULATOR_ENDPOINT``) or the ``endpoint`` file
the emulator writes into its state dir.

Why one module: it is one command group, the emulator's; ``start``'s options are its flags, and the
client commands share one way to find a running emulator (``--endpoint`` checked as
``http://HOST:PORT``, else the state dir's endpoint file) and one one-line form for its errors.
"""

from __future__ import annotations

import json
import math
import signal
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Any

import click

from kfp_spot.cli.pairs import GivenPath
from kfp_spot.vertex.values import show

DEFAULT_STATE_DIR = "kfp-spot-runs/emulator"


class _Seconds(click.FloatRange):
    """A finite number of seconds in a range.

    FloatRange lets nan and inf through (no bound refuses nan), which then failed as the
    emulator's error (exit 1) naming its parameter, not the option.
    """

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


def _seconds_list(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[float, ...]:
    if value is None:
        return ()
    if not value.strip():  # `--preempt-at "$TIMES"` with TIMES unset: no drill, silently
        raise click.BadParameter("is empty: write e.g. 5,12.5,30, or leave the option out")
    out = []
    for part in value.split(","):
        try:
            seconds = float(part)
        except ValueError:
            raise click.BadParameter(
                f"{part!r} is not a number of seconds; write e.g. 5,12.5,30"
            ) from None
        if not math.isfinite(seconds):
            raise click.BadParameter(f"{part!r} is not a finite number of seconds")
        if seconds < 0:
            raise click.BadParameter(f"{part} is negative; offsets are seconds >= 0")
        out.append(seconds)
    return tuple(out)


def _replica_name(value: str) -> str:
    """``value`` when it is a replica's name as Vertex gives it, else the option's error."""
    from kfp_spot.emulator.policy import REPLICA_NAME

    if REPLICA_NAME.match(value) is None:
        raise click.BadParameter(
            f"{value!r} is not a replica name; Vertex names replicas workerpoolP-I (pool P in "
            "0..3, index I), e.g. workerpool0-0 (the primary) or workerpool1-0"
        )
    return value


def _replica(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else _replica_name(value)


def _vm_offsets(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> dict[str, tuple[float, ...]]:
    out: dict[str, tuple[float, ...]] = {}
    for item in value:
        replica, sep, offsets = item.partition("=")
        if not sep or not replica.strip() or not offsets.strip():
            raise click.BadParameter(f"{item!r}: write REPLICA=S1[,S2...], e.g. workerpool1-0=5,20")
        out[_replica_name(replica.strip())] = _seconds_list(ctx, param, offsets)
    return out


def _capacity(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> int | dict[str, int] | None:
    form = "give VMs per machine type as N, or TYPE=N[,TYPE=N...] (e.g. n1-standard-4=2,*=1)"
    if value is None:
        return None
    if not value.strip():  # `--capacity "$N"` with N unset: no limit at all, silently
        raise click.BadParameter(f"is empty: {form}; leave --capacity out for no limit")
    out: int | dict[str, int]
    if value.isdigit():
        out = int(value)
    else:
        out = {}
        for part in value.split(","):
            key, sep, count = part.partition("=")
            if not sep or not count.isdigit() or int(count) < 1:
                raise click.BadParameter(f"{part!r}: {form}")
            if key.strip() in out:  # the last one would win silently
                raise click.BadParameter(
                    f"{key.strip()} is given twice ({out[key.strip()]} and {count}); give each "
                    "machine type once"
                )
            out[key.strip()] = int(count)
    from kfp_spot.emulator.emulator import EmulatorError, check_capacity

    try:  # a misspelt machine type, 0 VMs: the option's error (exit 2), not the emulator's (1)
        check_capacity(out)
    except EmulatorError as err:
        raise click.BadParameter(str(err)) from None
    return out


def _no_spot(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> list[tuple[str, str]]:
    out = []
    for item in value:
        location, _, machine_type = item.strip().partition("/")
        if not location or (_ and not machine_type):
            raise click.BadParameter(
                f"{item!r}: write LOCATION or LOCATION/MACHINE_TYPE, e.g. us-central1 or "
                "europe-west4/n1-standard-4"
            )
        out.append((location, machine_type or "*"))
    return out


@click.group()
def emulator() -> None:
    """Run and drive the local Vertex AI CustomJob emulator."""


def _host(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not value.strip():  # was the emulator's error (exit 1), naming no option
        raise click.BadParameter("is empty: name an interface, e.g. 127.0.0.1")
    return value


@emulator.command()
@click.option(
    "--host", default="127.0.0.1", show_default=True, callback=_host, help="Interface to bind."
)
@click.option("--port", default=0, type=click.IntRange(0, 65535), help="Port (0: a free one).")
@click.option(
    "--state-dir",
    default=DEFAULT_STATE_DIR,
    show_default=True,
    type=GivenPath(file_okay=False),
    help="SQLite state, logs; reuse it to resume jobs after a crash.",
)
@click.option(
    "--grace-period",
    default=30.0,
    show_default=True,
    type=_Seconds(min=0),
    help="Seconds between SIGTERM and SIGKILL at a preemption.",
)
@click.option(
    "--preempt-at",
    callback=_seconds_list,
    help="Preempt attempt i of every Spot job this many seconds into it: S1[,S2...].",
)
@click.option(
    "--preempt-every",
    type=_Seconds(min=0, min_open=True),
    help="Mean seconds between random preemptions (after the --preempt-at list).",
)
@click.option("--seed", type=int, help="Seed for random preemptions (reproducible).")
@click.option(
    "--preempt-vm-at",
    multiple=True,
    callback=_vm_offsets,
    help="One VM at a time: REPLICA=S1[,S2...] preempts the i-th start of that replica's VM "
    "S_i seconds after it started (repeatable). A worker is replaced while the others run.",
)
@click.option(
    "--preempt-vm-every",
    type=_Seconds(min=0, min_open=True),
    help="Mean seconds between random preemptions of each VM (one clock per VM; --seed).",
)
@click.option(
    "--vm-downtime",
    default=0.0,
    show_default=True,
    type=_Seconds(min=0),
    help="Seconds a preempted worker's VM is away (not billed) before its replacement starts.",
)
@click.option("--capacity", callback=_capacity, help="Simulated VMs: N per type, or TYPE=N,...")
@click.option(
    "--no-spot",
    multiple=True,
    callback=_no_spot,
    metavar="LOCATION[/MACHINE_TYPE]",
    help="The region has no Spot capacity (for that machine type, else for every one) from the "
    "start, for good (repeatable): its Spot jobs wait, then FAIL with Vertex's stockout.",
)
@click.option(
    "--stockout-seconds",
    default=10.0,
    show_default=True,
    type=_Seconds(min=0),
    help="Seconds a Spot job waits for Spot capacity its region has none of before it FAILS "
    "(code 8, STOCKOUT).",
)
@click.option(
    "--env-cache-dir",
    type=GivenPath(file_okay=False),
    help="Where package environments are cached (default: the shared kfp-spot cache).",
)
def start(
    host: str,
    port: int,
    state_dir: str,
    grace_period: float,
    preempt_at: tuple[float, ...],
    preempt_every: float | None,
    seed: int | None,
    preempt_vm_at: dict[str, tuple[float, ...]],
    preempt_vm_every: float | None,
    vm_downtime: float,
    capacity: int | dict[str, int] | None,
    no_spot: list[tuple[str, str]],
    stockout_seconds: float,
    env_cache_dir: str | None,
) -> None:
    """Serve the emulator in the foreground until SIGINT, SIGTERM or SIGHUP."""
    from kfp_spot.emulator import Emulator, EmulatorError

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    stops = [signal.SIGINT, signal.SIGTERM]
    hangup = getattr(signal, "SIGHUP", None)  # its terminal closed; absent on Windows
    if hangup is not None and signal.getsignal(hangup) != signal.SIG_IGN:  # nohup: keep ignoring
        stops.append(hangup)
    # Python's default for SIGTERM and SIGHUP ends the process at once, leaving the replicas
    # (each in a session of its own) training.
    previous = {s: signal.signal(s, on_signal) for s in stops}
    try:
        emu = Emulator(
            state_dir,
            host=host,
            port=port,
            grace_period=grace_period,
            preempt_at=preempt_at,
            preempt_every=preempt_every,
            seed=seed,
            capacity=capacity,
            env_cache_dir=env_cache_dir,
            preempt_vm_at=preempt_vm_at,
            preempt_vm_every=preempt_vm_every,
            vm_downtime=vm_downtime,
            stockout_seconds=stockout_seconds,
        )
        for location, machine_type in no_spot:
            try:
                emu.set_spot_capacity(location, machine_type, available=False)
            except ValueError as err:
                raise click.BadParameter(str(err), param_hint="--no-spot") from None
        emu.start()
    except EmulatorError as err:
        raise click.ClickException(str(err)) from None
    try:
        click.echo(f"kfp-spot emulator serving {emu.endpoint} (state dir {state_dir})")
        click.echo("Stop with Ctrl-C (SIGINT) or SIGTERM.", err=True)
        stop.wait()
        click.echo("stopping: running attempts are stopped and resume on the next start", err=True)
    finally:
        emu.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# client commands -----------------------------------------------------------------------------


def _checked_endpoint(url: str, source: str) -> str:
    """``url`` without a trailing ``/`` when it is ``http(s)://HOST[:PORT]``, else a usage error."""
    try:  # urlsplit raises on a malformed [IPv6] host, `.port` on a port out of 0..65535
        parsed = urllib.parse.urlsplit(url.strip())
        parsed.port  # noqa: B018
    except ValueError:
        parsed = urllib.parse.SplitResult("", "", "", "", "")
    # A query or fragment would swallow the path each command appends to the endpoint.
    extra = parsed.path.strip("/") or "?" in url or "#" in url
    # Not ASCII (an undecodable byte from the shell, too): the HTTP client's encoding traceback.
    if not url.isascii() or parsed.scheme not in ("http", "https") or not parsed.hostname or extra:
        raise click.UsageError(
            f"{source}: {show(url)} is not an emulator endpoint; give http://HOST:PORT, "
            "e.g. http://127.0.0.1:8080 (what `kfp-spot emulator start` prints)"
        )
    return url.strip().rstrip("/")


def _endpoint(endpoint: str | None, state_dir: str) -> str:
    if endpoint:
        return _checked_endpoint(endpoint, "--endpoint ($KFP_SPOT_EMULATOR_ENDPOINT)")
    path = Path(state_dir) / "endpoint"
    try:
        found = _no_endpoint_file(path)
        if found.endswith(" is missing") and _serving(state_dir):
            # An emulator removes the file when it takes the state dir, writes it once it serves.
            raise click.ClickException(
                f"the emulator of {state_dir} is starting: {path} is written once it serves; "
                "try again in a moment, or pass --endpoint"
            )
        if not found:
            with path.open("rb") as file:  # a real endpoint file is one short line
                raw = file.read(_ENDPOINT_FILE_BYTES)
            text = raw.decode(errors="replace").strip()
            url = _checked_endpoint(text, f"the endpoint file {path}") if text else ""
            if not url or not raw.endswith(b"\n"):
                # An emulator writes the line whole (a temp file renamed over it): an empty file
                # or a line cut short is no emulator's, and its port may be someone else's.
                held = f"holds {show(text)}, not a whole line" if text else "is empty"
                raise click.ClickException(
                    f"the endpoint file {path} {held}: an emulator writes http://HOST:PORT and a "
                    f"newline once it serves; start one with `kfp-spot emulator start --state-dir "
                    f"{state_dir}`, or pass --endpoint"
                )
            if not _serving(state_dir):
                # The file outlives its emulator (a stop, a crash): its port may be another
                # emulator's by now, whose jobs a preempt would then hit.
                raise click.ClickException(
                    f"the emulator of {state_dir} is not running: {path} names {url}, where it "
                    f"served before it stopped; start it again with `kfp-spot emulator start "
                    f"--state-dir {state_dir}`, or pass --endpoint of one that runs"
                )
            return url
    except OSError as exc:  # a symlink loop, a name too long, an unreadable file
        found = f"{show(str(path))} cannot be read ({exc.strerror or exc})"
    raise click.UsageError(
        f"no emulator endpoint: pass --endpoint http://127.0.0.1:PORT, set "
        f"KFP_SPOT_EMULATOR_ENDPOINT, or --state-dir of a running emulator ({found})"
    )


_ENDPOINT_FILE_BYTES = 4096


def _no_endpoint_file(path: Path) -> str:
    """Why ``path`` is not an endpoint file to read ("" when it is a regular file)."""
    state_dir = path.parent
    if path.is_file():
        return ""
    if path.is_dir():
        return f"{path} is a directory, not the endpoint file a running emulator writes"
    if path.exists():
        return f"{path} is not a regular file, not the endpoint file a running emulator writes"
    if not state_dir.is_dir():
        return f"{state_dir} " + ("is not a directory" if state_dir.exists() else "does not exist")
    return f"{path} is missing"


def _call(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body or {}).encode() if method == "POST" else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        try:
            message = json.loads(err.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = str(err)
        raise click.ClickException(message) from None
    except (urllib.error.URLError, OSError) as err:
        raise click.ClickException(
            f"cannot reach the emulator at {url}: {err}; is `kfp-spot emulator start` running?"
        ) from None


def _serving(state_dir: str) -> bool:
    """Whether an emulator holds ``state_dir`` now (it locks the dir while it runs)."""
    from kfp_spot.emulator.statedir import StateDir, StateDirBusyError

    try:
        StateDir(Path(state_dir)).release()
    except StateDirBusyError:
        return True
    return False


def _saved_logs(
    state_dir: Path, job: str, attempt: int | None, replica: str | None
) -> list[dict[str, Any]] | None:
    """A job's log files in ``state_dir`` (as the emulator serves them), None without any."""
    from kfp_spot.emulator.statedir import saved_logs

    found = saved_logs(state_dir, job.strip("/").rsplit("/", 1)[-1])
    if found is None:
        return None
    if attempt is not None and attempt not in found:
        had = f"attempts 1..{max(found)}" if found else "no attempt yet"
        raise click.ClickException(f"{job} has no attempt {attempt} in {state_dir}: it has {had}")
    entries = []
    for number, paths in found.items():
        for path in paths if attempt in (None, number) else []:
            if replica is None or path.stem == replica:
                text = path.read_bytes().decode("utf-8", "replace")
                entries.append({"attempt": number, "replica": path.stem, "text": text})
    # The emulator is stopped, so no replica is still to start: one that left no log never ran.
    ran = sorted({p.stem for n, paths in found.items() if attempt in (None, n) for p in paths})
    if replica is not None and not entries and ran:
        raise click.ClickException(
            f"{job} has no replica {replica} in {state_dir}"
            + (f" (attempt {attempt})" if attempt is not None else "")
            + f": it has {', '.join(ran)}"
        )
    return entries


def _checked_job(job: str) -> str:
    """``job`` when it is a CustomJob's full name or a bare numeric id, else a usage error.

    The name goes into the URL's path as it is: a space or a non-ASCII character in it was the
    HTTP client's traceback, and ``..`` or ``?`` would name another path.
    """
    if job.isascii() and job.isdigit():
        return job
    if "/" in job:
        from kfp_spot.cli.rest import RESOURCE

        match = RESOURCE.fullmatch(job.strip("/"))
        if match is not None and match.group(2) == "customJobs":
            return job.strip("/")
    raise click.BadParameter(
        f"{job!r}: give projects/P/locations/L/customJobs/ID or the numeric ID",
        param_hint="JOB_NAME",
    )


def _job_arg(ctx: click.Context, param: click.Parameter, value: str) -> str:
    return _checked_job(value)


def _job_name(base: str, job: str) -> str:
    """Full resource name of ``job`` (a name or a bare numeric id, checked by ``_checked_job``)."""
    if "/" in job:
        return job
    for item in _call("GET", f"{base}/emulator/v1/customJobs").get("customJobs", []):
        name = str(item["name"])
        if name.rsplit("/", 1)[-1] == job:
            return name
    raise click.ClickException(f"the emulator at {base} has no job with id {job}")


_endpoint_option = click.option(
    "--endpoint",
    envvar="KFP_SPOT_EMULATOR_ENDPOINT",
    help="http://HOST:PORT of a running emulator ($KFP_SPOT_EMULATOR_ENDPOINT).",
)
_state_option = click.option(
    "--state-dir",
    type=GivenPath(),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="State dir of the running emulator (its endpoint file), when --endpoint is not given.",
)


@emulator.command()
@click.argument("job_name", callback=_job_arg)
@click.option(
    "--replica",
    callback=_replica,
    help="Preempt only this replica's VM, e.g. workerpool1-0: a worker is replaced while the "
    "others keep running; the primary's (workerpool0-0) preempts the attempt.",
)
@_endpoint_option
@_state_option
def preempt(job_name: str, replica: str | None, endpoint: str | None, state_dir: str) -> None:
    """Preempt the running attempt of a Spot job, or one VM (SIGTERM, grace period, SIGKILL)."""
    base = _endpoint(endpoint, state_dir)
    name = _job_name(base, job_name)
    body = {"replica": replica} if replica else {}
    result = _call("POST", f"{base}/emulator/v1/{name}:preempt", body)
    what = f"the VM of {replica} in " if replica else ""
    click.echo(f"preempting {what}attempt {result.get('attempt')} of {name}")


@emulator.command()
@click.argument("job_name", callback=_job_arg)
@click.option(  # the emulator reads it as an int32: a larger one was its 400, exit 1
    "--attempt", type=click.IntRange(1, 2**31 - 1), help="Only this attempt (1-based)."
)
@click.option("--replica", callback=_replica, help="Only this replica, e.g. workerpool0-0.")
@_endpoint_option
@_state_option
def logs(
    job_name: str, attempt: int | None, replica: str | None, endpoint: str | None, state_dir: str
) -> None:
    """Print the logs of a job, per attempt and replica (from --state-dir's files when stopped)."""
    saved = _saved_logs(Path(state_dir), job_name, attempt, replica) if not endpoint else None
    stopped = not endpoint and (Path(state_dir) / "logs").is_dir() and not _serving(state_dir)
    if saved is not None and stopped:
        entries, name = saved, job_name
    elif stopped:  # no emulator holds the dir to ask: its files are all there is
        known = sorted(p.name for p in (Path(state_dir) / "logs").iterdir() if p.is_dir())
        raise click.ClickException(
            f"{job_name} has no logs in {state_dir}, whose emulator has stopped; the jobs there: "
            f"{', '.join(known) or 'none'}"
        )
    else:
        base = _endpoint(endpoint, state_dir)
        name = _job_name(base, job_name)
        query: dict[str, str | int] = {}
        if attempt:
            query["attempt"] = attempt
        if replica:
            query["replica"] = replica
        url = f"{base}/emulator/v1/{name}/logs"
        url += "?" + urllib.parse.urlencode(query) if query else ""
        entries = _call("GET", url).get("logs", [])
    if not entries:
        click.echo(f"no logs yet for {name}", err=True)
    for entry in entries:
        click.echo(f"==> attempt {entry['attempt']} {entry['replica']} <==")
        click.echo(entry["text"], nl=not entry["text"].endswith("\n"))


@emulator.command()
@click.argument("job_name", callback=_job_arg)
@click.option("--json", "as_json", is_flag=True, help="Print the ledger rows as JSON.")
@_endpoint_option
@_state_option
def attempts(job_name: str, as_json: bool, endpoint: str | None, state_dir: str) -> None:
    """Print a job's attempts: times, end reason, billable seconds and cost."""
    base = _endpoint(endpoint, state_dir)
    name = _job_name(base, job_name)
    rows = _call("GET", f"{base}/emulator/v1/{name}/attempts").get("attempts", [])
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    click.echo(f"{'#':>2} {'end reason':<19} {'billable s':>10} {'queued s':>9} {'spot $':>10}")
    for row in rows:
        click.echo(
            f"{row['attempt']:>2} {row['endReason'] or 'RUNNING':<19} "
            f"{row['billableSeconds']:>10.1f} {row['queuedSeconds']:>9.1f} {row['spotCost']:>10.6f}"
        )
        vms = row.get("vms") or []
        for vm in vms if len(vms) > 1 else []:
            away = sum(g["seconds"] for g in vm.get("gaps", []))
            click.echo(
                f"   {vm['replica']:<19} {vm['billableSeconds']:>10.1f} {'':>9} "
                f"{vm['spotCost']:>10.6f}  preempted {vm['preemptions']}x, away {away:.1f} s"
            )


@emulator.command()
@_endpoint_option
@_state_option
def jobs(endpoint: str | None, state_dir: str) -> None:
    """List every job the emulator holds."""
    from kfp_spot.cli.rest import one_line

    base = _endpoint(endpoint, state_dir)
    for item in _call("GET", f"{base}/emulator/v1/customJobs").get("customJobs", []):
        click.echo(f"{item['name']}  {item['state']}  {one_line(item.get('displayName', ''))}")
