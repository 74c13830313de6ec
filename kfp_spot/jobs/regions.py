"""A launch across regions: each region's service and output directory, and the copies between.

Per region (:class:`Sites`): its endpoint (on Vertex AI each region has its own
``REGION-aiplatform.googleapis.com``; the emulator serves every region on one), its JobService,
its backend and the parent ``projects/P/locations/REGION``, made when first needed and kept.

Per region, too, its base output directory (:func:`region_bases`, worked out before anything is
submitted): the launch's own base output directory when its bucket serves the region
(:func:`kfp_spot.vertex.storage.bucket_serves`; the bucket's location is read once through the
Cloud Storage JSON API), else ``region_buckets[region]`` joined with the base directory's path, so
runs never collide. A job reads and writes its checkpoints in its region's directory; the newest
verified step follows the launch from region to region (:func:`carry_step`), and at the end the
newest step and the model come home, where the component's outputs say they are
(:func:`bring_home`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kfp_spot import checkpoints, fs
from kfp_spot.jobs.backend import Backend
from kfp_spot.jobs.inputs import LaunchInputError
from kfp_spot.jobs.recovery import Submission, region_of
from kfp_spot.jobs.resume import copy_step, copy_tree
from kfp_spot.jobs.service import JobService
from kfp_spot.validation.component_inputs import inputs_of
from kfp_spot.vertex.client import Endpoint, resolve_endpoint
from kfp_spot.vertex.storage import LOCAL_STORAGE, bucket_serves

log = logging.getLogger("kfp_spot.jobs.launcher")

# A bucket's location: (``location``, ``customPlacementConfig.dataLocations``).
BucketLocation = tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class Site:
    """Where the launch's jobs in one region are sent."""

    region: str
    endpoint: Endpoint
    service: JobService
    backend: Backend
    parent: str  # projects/P/locations/REGION


def location_of(job_name: str) -> str:
    """The region of a CustomJob resource name ``projects/P/locations/L/customJobs/ID``.

    Raises:
        ValueError: naming the name and the form expected.
    """
    parts = job_name.split("/")
    if len(parts) != 6 or parts[0] != "projects" or parts[2] != "locations" or not parts[3]:
        raise ValueError(
            f"{job_name!r} is not a CustomJob name; expected projects/P/locations/L/customJobs/ID"
        )
    return parts[3]


class Sites:
    """Each region's endpoint, JobService and backend, made lazily and cached.

    Args:
        project: the launch's project.
        api_endpoint: the ``api_endpoint`` input ("" for each region's Vertex AI endpoint).
        home: the first region's site (the launcher's, possibly with a test's service).
    """

    def __init__(self, project: str, api_endpoint: str, home: Site) -> None:
        self._project = project
        self._api_endpoint = api_endpoint
        self._home = home
        self._sites = {home.region: home}

    def endpoint(self, region: str) -> Endpoint:
        """The endpoint jobs in ``region`` are sent to.

        Raises:
            LaunchInputError: naming ``api_endpoint`` when it names one Vertex AI endpoint but the
                launch may run in another region (each region has its own).
        """
        if region in self._sites:
            return self._sites[region].endpoint
        with inputs_of(LaunchInputError):
            endpoint = resolve_endpoint(region, self._api_endpoint)
        if self._api_endpoint and not endpoint.local and region != self._home.region:
            raise LaunchInputError(
                "api_endpoint",
                f"{self._api_endpoint!r} is one Vertex AI endpoint, but the launch may run in "
                f"{region} too: leave api_endpoint empty (each region's own endpoint) or list "
                "a single region",
            )
        return endpoint

    def get(self, region: str) -> Site:
        """The site of ``region`` (made on first use)."""
        site = self._sites.get(region)
        if site is None:
            endpoint = self.endpoint(region)
            home = self._home
            if endpoint == home.endpoint:  # the emulator: one endpoint serves every region
                service, backend = home.service, home.backend
            else:
                backend = dataclasses.replace(home.backend, endpoint=endpoint)
                service = JobService(endpoint, retry=backend.retry)
            site = Site(
                region, endpoint, service, backend, f"projects/{self._project}/locations/{region}"
            )
            self._sites[region] = site
        return site

    def of_job(self, job_name: str) -> Site:
        """The site of the region ``job_name`` lives in."""
        return self.get(location_of(job_name))


def read_bucket_location(uri: str) -> BucketLocation:
    """The location of the bucket ``uri`` is in (one GET of the bucket, JSON API, via gcsfs).

    A local path is :data:`~kfp_spot.vertex.storage.LOCAL_STORAGE`.

    Raises:
        LaunchInputError: naming ``base_output_directory`` when the bucket cannot be read.
    """
    if not uri.startswith("gs://"):
        return LOCAL_STORAGE, ()
    filesystem, path = fs.filesystem(uri)
    bucket = path.split("/", 1)[0]
    try:
        info = filesystem.info(bucket)
    except (OSError, ValueError) as exc:
        raise LaunchInputError(
            "base_output_directory",
            f"cannot read the location of bucket gs://{bucket} ({exc}); the launcher needs "
            "storage.buckets.get on it to tell which regions it serves",
        ) from exc
    location = info.get("location") if isinstance(info, Mapping) else None
    if not isinstance(location, str) or not location:
        raise LaunchInputError(
            "base_output_directory",
            f"Cloud Storage did not say where bucket gs://{bucket} is (no location); the "
            "launcher needs storage.buckets.get on it to tell which regions it serves",
        )
    placement = info.get("customPlacementConfig") or {}
    places = placement.get("dataLocations") or () if isinstance(placement, Mapping) else ()
    return location, tuple(str(p) for p in places)


def _bucket_path(uri: str) -> tuple[str, str]:
    """``(bucket, path)`` of ``gs://bucket/path`` (``("", path)`` for a local path)."""
    if uri.startswith("gs://"):
        bucket, _, path = uri[len("gs://") :].partition("/")
        return bucket, path.strip("/")
    return "", uri.strip("/")


def region_bases(
    base: str,
    order: Sequence[str],
    region_buckets: Mapping[str, str],
    locate: Callable[[str], BucketLocation] = read_bucket_location,
) -> dict[str, str]:
    """Each region's base output directory (see the module docstring).

    Args:
        base: the launch's base output directory (the home of its outputs).
        order: the regions the launch may run in.
        region_buckets: region -> base directory for that region's copy of the checkpoints.
        locate: reads a bucket's location (the I/O edge; read once here).

    Raises:
        LaunchInputError: naming ``region_buckets`` when the base directory's bucket does not
            serve a region that has no entry there: the bucket, its location, the region and what
            to set.
    """
    bases: dict[str, str] = {}
    location = locate(base)
    bucket, path = _bucket_path(base)
    for region in order:
        if bucket_serves(location[0], region, location[1]):
            bases[region] = base
            continue
        if region in region_buckets:
            own = region_buckets[region]
            bases[region] = fs.join(own, path) if path else own
            continue
        where = location[0] + (f" ({', '.join(location[1])})" if location[1] else "")
        raise LaunchInputError(
            "region_buckets",
            f"bucket gs://{bucket} of base_output_directory is in {where}, which does not serve "
            f"{region}: a job there would read and write its checkpoints across regions. Set "
            f'region_buckets={{"{region}": "gs://A-BUCKET-IN-{region.upper()}"}} (the launcher '
            f"copies the newest checkpoint there before a job runs in {region}), use a bucket "
            f"that serves every region of {', '.join(order)}, or leave {region} out of regions",
        )
    return bases


def newest_step(roots: Iterable[str]) -> tuple[str, checkpoints.Manifest] | None:
    """The newest step that verifies (every file's checksum) across ``roots``, and its root."""
    best: tuple[str, checkpoints.Manifest] | None = None
    for root in dict.fromkeys(roots):
        manifest = checkpoints.latest(root, check_hashes=True)
        if manifest is not None and (best is None or manifest.step > best[1].step):
            best = (root, manifest)
    return best


def carry_step(roots: Iterable[str], target_root: str) -> tuple[int | None, int]:
    """Commit in ``target_root`` the newest verified step of ``roots`` (and of ``target_root``).

    Returns:
        The step a job on ``target_root`` resumes from (None: no step anywhere) and the bytes
        copied (0 when ``target_root`` already had it).

    Raises:
        checkpoints.CheckpointError: when the copy does not verify.
    """
    roots = [target_root, *roots]
    if set(roots) == {target_root}:  # one directory: nothing to carry, no hashes to read
        own = checkpoints.latest(target_root, check_hashes=False)
        return (own.step if own else None), 0
    found = newest_step(roots)
    if found is None:
        return None, 0
    source, manifest = found
    if source == target_root:
        return manifest.step, 0
    copy, copied = copy_step(source, manifest, target_root)
    log.info(
        "copied step %d from %s to %s (%d bytes), verified", copy.step, source, target_root, copied
    )
    return copy.step, copied


def bring_home(roots: Iterable[str], home: str, last_base: str) -> int:
    """Copy the newest verified step of ``roots``, their attempt records and the last model home.

    Args:
        roots: the checkpoint directories the launch used.
        home: the launch's own base output directory.
        last_base: the base output directory of the region the last job ran in.

    Returns:
        The bytes copied (0 when everything was home already).
    """
    home_root = fs.join(home, "checkpoints")
    _, copied = carry_step(roots, home_root)
    # The attempt records of jobs that ran away (a few small files): the report reads them home.
    for root in dict.fromkeys(roots):
        if root != home_root:
            copied += copy_tree(
                fs.join(root, checkpoints.ATTEMPTS_DIR),
                fs.join(home_root, checkpoints.ATTEMPTS_DIR),
            )
    if last_base != home:
        model, home_model = fs.join(last_base, "model"), fs.join(home, "model")
        filesystem, path = fs.filesystem(home_model)
        if not (filesystem.exists(path) and filesystem.find(path)):
            moved = copy_tree(model, home_model)
            if moved:
                log.info("copied the model from %s to %s (%d bytes)", model, home_model, moved)
            copied += moved
    return copied


@dataclass(frozen=True)
class Storage:
    """Where each region's jobs write, and the copies that carry a launch between regions.

    Args:
        home: the launch's own base output directory (where the component's outputs are).
        order: the regions the launch may run in (the first: the home region).
        bases: region -> its base output directory (:func:`region_bases`; all ``home`` when
            the home bucket serves every region).
    """

    home: str
    order: tuple[str, ...]
    bases: Mapping[str, str]

    def base(self, region: str) -> str:
        """The base output directory of jobs in ``region``."""
        return self.bases.get(region, self.home)

    def checkpoints(self, region: str) -> str:
        """The checkpoint directory of jobs in ``region``."""
        return fs.join(self.base(region), "checkpoints")

    def _used(self, subs: Sequence[Submission]) -> list[str]:
        home = fs.join(self.home, "checkpoints")
        return [home, *(self.checkpoints(region_of(s, self.order)) for s in subs)]

    def carry(self, subs: Sequence[Submission], region: str) -> tuple[int | None, int]:
        """Before a job in ``region``: the newest verified step of the launch copied there.

        Returns:
            The step the job resumes from (None: none) and the bytes copied.
        """
        return carry_step(self._used(subs), self.checkpoints(region))

    def bring_home(self, subs: Sequence[Submission]) -> int:
        """At the end: the newest verified step and the last job's model copied home; bytes."""
        if not subs:
            return 0
        last = self.base(region_of(subs[-1], self.order))
        return bring_home(self._used(subs), self.home, last)


def prepare_storage(
    sites: Sites, base: str, order: Sequence[str], region_buckets: Mapping[str, str]
) -> Storage:
    """Before anything is submitted: each region's endpoint checked, its base directory found.

    Raises:
        LaunchInputError: naming ``api_endpoint`` or ``region_buckets`` (:meth:`Sites.endpoint`,
            :func:`region_bases`).
    """
    for region in order:
        sites.endpoint(region)
    bases = region_bases(base, order, region_buckets) if len(order) > 1 else {}
    return Storage(base, tuple(order), bases)
