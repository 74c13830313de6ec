"""Tar members unpacked by the ``data`` filter's rules, with or without this Python's filter.

The runtime image's Python (Debian's 3.11.2) has no extraction filters; kfp_spot.archives
applies the same rules there. Each member here is judged by the fallback and by the standard
library's ``tarfile.data_filter``, and the two must agree.
"""

from __future__ import annotations

import io
import re
import stat
import tarfile
from pathlib import Path

import pytest

from kfp_spot import archives
from kfp_spot.archives import UnsafeMemberError, checked_member, extract_member

ROOT = Path(__file__).resolve().parents[1]


def _member(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, link: str = ""):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    info.uid, info.gid, info.uname, info.gname = 1234, 5678, "someone", "staff"
    return info


MEMBERS = {
    "file": (_member("pkg/a.py"), True),
    "executable": (_member("pkg/run.sh", mode=0o775), True),
    "setuid, world-writable": (_member("pkg/b.py", mode=0o4777), True),
    "directory": (_member("pkg/sub", tarfile.DIRTYPE, 0o777), True),
    "link inside": (_member("pkg/l", tarfile.SYMTYPE, link="a.py"), True),
    "hard link inside": (_member("pkg/h", tarfile.LNKTYPE, link="pkg/a.py"), True),
    "leading slash": (_member("/pkg/c.py"), True),  # the slash is dropped, as the filter does
    "parent path": (_member("../up.py"), False),
    "parent path inside a name": (_member("pkg/../../up.py"), False),
    "link leaving": (_member("pkg/out", tarfile.SYMTYPE, link="../../etc/passwd"), False),
    "absolute link": (_member("pkg/abs", tarfile.SYMTYPE, link="/etc/passwd"), False),
    "hard link leaving": (_member("pkg/hl", tarfile.LNKTYPE, link="../x"), False),
    "fifo": (_member("pkg/fifo", tarfile.FIFOTYPE), False),
    "character device": (_member("pkg/tty", tarfile.CHRTYPE), False),
    "block device": (_member("pkg/disk", tarfile.BLKTYPE), False),
}


@pytest.mark.parametrize("case", sorted(MEMBERS))
def test_the_fallback_judges_each_member_as_the_standard_filter_does(case, tmp_path):
    member, allowed = MEMBERS[case]
    try:
        standard = tarfile.data_filter(member, str(tmp_path))
    except tarfile.FilterError:
        standard = None
    assert (standard is not None) == allowed  # the table says what the standard filter does
    if not allowed:
        with pytest.raises(UnsafeMemberError, match=re.escape(repr(member.name))):
            checked_member(member, tmp_path)
        return
    ours = checked_member(member, tmp_path)
    assert ours.name == standard.name
    if standard.mode is not None:
        assert ours.mode == standard.mode
    assert ours.mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | 0o022) == 0
    assert member.uid == 1234  # the caller's member is left as it was


def _archive(path: Path, *members: tuple[tarfile.TarInfo, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tf.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


@pytest.mark.parametrize("has_filter", [True, False], ids=["this python", "no filter (3.11.2)"])
def test_extract_member_writes_what_is_safe_and_refuses_the_rest(tmp_path, monkeypatch, has_filter):
    if not has_filter:  # as on the runtime image's Python: tarfile without PEP 706's filters
        monkeypatch.delattr(tarfile, "data_filter")
    archive = _archive(
        tmp_path / "a.tar.gz",
        (_member("pkg/a.py", mode=0o4777), b"x = 1\n"),
        (_member("pkg/l", tarfile.SYMTYPE, link="a.py"), b""),
        (_member("pkg/evil", tarfile.SYMTYPE, link="../../outside"), b""),
    )
    dest = tmp_path / "out"
    dest.mkdir()
    with tarfile.open(archive) as tf:
        members = tf.getmembers()
        extract_member(tf, members[0], dest)
        extract_member(tf, members[1], dest)
        with pytest.raises(UnsafeMemberError, match="'pkg/evil'"):
            extract_member(tf, members[2], dest)
    assert (dest / "pkg" / "a.py").read_text() == "x = 1\n"
    assert stat.S_IMODE((dest / "pkg" / "a.py").stat().st_mode) == 0o755
    assert (dest / "pkg" / "l").read_text() == "x = 1\n"
    assert not (dest / "pkg" / "evil").exists() and not (dest / "pkg" / "evil").is_symlink()


def test_no_module_but_archives_passes_tarfile_a_filter():
    # extract(..., filter="data") is a TypeError on the runtime image's Python
    call = re.compile(r"\.extract(all)?\([^)]*filter=")
    offenders = [
        str(path.relative_to(ROOT))
        for tree in ("kfp_spot", "components", "pipelines")
        for path in (ROOT / tree).rglob("*.py")
        if path != Path(archives.__file__) and call.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
