import os
import threading

import pytest

from kfp_spot import fs


def test_atomic_write_replaces_whole_and_leaves_no_temp_files(tmp_path):
    target = tmp_path / "sub" / "state.json"
    fs.atomic_write(str(target), "old")
    fs.atomic_write(str(target), b"new content")
    assert target.read_bytes() == b"new content"
    assert os.listdir(target.parent) == ["state.json"]


def test_atomic_write_concurrent_writers_never_mix(tmp_path):
    target = tmp_path / "f.bin"
    payloads = [bytes([i]) * 200_000 for i in range(8)]
    errors = []

    def writer(data):
        try:
            for _ in range(10):
                fs.atomic_write(str(target), data)
        except OSError as exc:  # pragma: no cover - the failure we test for
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert target.read_bytes() in payloads
    assert os.listdir(tmp_path) == ["f.bin"]


def test_atomic_write_file_url(tmp_path):
    fs.atomic_write(f"file://{tmp_path}/x.txt", "hi")
    assert (tmp_path / "x.txt").read_text() == "hi"


@pytest.mark.parametrize("form", ["{}", "file://{}"])
def test_listing_a_file_is_not_a_directory(tmp_path, form):
    # fsspec lists a file as itself: a Model's artifactUri naming its model.pkl passed the
    # upload's check as a directory holding one file of that name.
    (tmp_path / "model.pkl").write_bytes(b"x")
    with pytest.raises(NotADirectoryError, match="is a file, not a directory"):
        fs.list_names(form.format(tmp_path / "model.pkl"))
    assert fs.list_names(form.format(tmp_path)) == ["model.pkl"]
