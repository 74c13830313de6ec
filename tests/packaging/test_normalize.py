"""Archive normalization: the same files in any order, with any times and owners, give the same
bytes (property-tested on generated archives, no build needed)."""

import io
import tarfile
import zipfile

from hypothesis import given, settings
from hypothesis import strategies as st

from kfp_spot.packaging.build import normalize_sdist, normalize_wheel

names = st.lists(
    st.from_regex(r"[a-z]{1,8}(/[a-z]{1,8}){0,2}\.(py|txt)", fullmatch=True),
    min_size=1,
    max_size=6,
    unique=True,
)
files = names.flatmap(lambda ns: st.fixed_dictionaries({n: st.binary(max_size=64) for n in ns}))
meta = st.tuples(st.integers(0, 2**31), st.integers(0, 5000), st.sampled_from([0o644, 0o600]))


def make_tar(path, content, order, stamps):
    with tarfile.open(path, "w:gz") as tf:
        for name, (mtime, uid, mode) in zip(order, stamps, strict=False):
            info = tarfile.TarInfo(f"pkg-1.0/{name}")
            info.size, info.mtime, info.uid, info.mode = len(content[name]), mtime, uid, mode
            info.uname = f"user{uid}"
            tf.addfile(info, io.BytesIO(content[name]))


def make_zip(path, content, order, stamps):
    with zipfile.ZipFile(path, "w") as zf:
        for name, (mtime, _, _) in zip(order, stamps, strict=False):
            year = 1980 + mtime % 40
            zf.writestr(zipfile.ZipInfo(name, (year, 1 + mtime % 12, 1, 0, 0, 0)), content[name])
        zf.writestr("pkg-1.0.dist-info/RECORD", b"")


@settings(max_examples=40, deadline=None)
@given(content=files, data=st.data())
def test_any_order_times_and_owners_normalize_to_the_same_bytes(tmp_path_factory, content, data):
    tmp = tmp_path_factory.mktemp("norm")
    outputs = {"tar": set(), "zip": set()}
    for i in range(2):
        order = data.draw(st.permutations(sorted(content)))
        stamps = data.draw(st.lists(meta, min_size=len(order), max_size=len(order)))
        tar, whl = tmp / f"{i}.tar.gz", tmp / f"{i}.whl"
        make_tar(tar, content, order, stamps)
        make_zip(whl, content, order, stamps)
        normalize_sdist(tar)
        normalize_wheel(whl)
        outputs["tar"].add(tar.read_bytes())
        outputs["zip"].add(whl.read_bytes())
    assert len(outputs["tar"]) == 1 and len(outputs["zip"]) == 1
    # Contents survive normalization.
    with tarfile.open(tmp / "0.tar.gz") as tf:
        assert {m.name[len("pkg-1.0/") :]: tf.extractfile(m).read() for m in tf} == content
    with zipfile.ZipFile(tmp / "0.whl") as zf:
        names = zf.namelist()
        assert names[-1] == "pkg-1.0.dist-info/RECORD"
        assert {n: zf.read(n) for n in names[:-1]} == content
