"""An extra package that is a wheel pip on Vertex AI refuses is refused before anything is staged.

A wheel built on a Mac (or for Windows, or another Python) installs on this machine and in the
local emulator; on Vertex AI pip refuses it on the training VMs (Linux x86_64, the executor
image's CPython) and in kfp-spot's runtime image, where the evaluation installs it too.
"""

import pytest

from kfp_spot.executors import DEFAULT_EXECUTOR_IMAGE
from kfp_spot.packaging import PackageUrisError, check_package_uris
from kfp_spot.packaging.wheeltags import unsupported_reason

PYTORCH_IMAGE = "us-docker.pkg.dev/vertex-ai/training/pytorch-xla.2-3.py310:latest"


def _extras(tmp_path, *names):
    for name in names:
        (tmp_path / name).write_bytes(b"PK")  # only its name is judged
    return [str(tmp_path / name) for name in names]


@pytest.mark.parametrize(
    ("name", "platform"),
    [
        ("fastops-1.0-cp311-cp311-macosx_14_0_arm64.whl", "macOS arm64"),
        ("fastops-1.0-cp310-cp310-win_amd64.whl", "Windows"),
        ("fastops-1.0-cp310-cp310-musllinux_1_1_x86_64.whl", "musl Linux"),
        ("fastops-1.0-cp310-cp310-manylinux2014_aarch64.whl", "manylinux2014_aarch64"),
    ],
)
def test_a_wheel_for_another_platform_is_refused_naming_it(tmp_path, name, platform):
    extras = _extras(tmp_path, "dep-1.0.tar.gz", name)
    with pytest.raises(PackageUrisError) as info:
        check_package_uris(extras, PYTORCH_IMAGE)
    assert info.value.field == "extra_package_uris[1]"
    message = str(info.value)
    assert f"{name!r} is a wheel for {platform}" in message
    assert "pip in the training VMs' image pytorch-xla.2-3.py310 (Linux x86_64, CPython 3.10)" in (
        message
    )
    assert "give a manylinux x86_64 wheel for CPython 3.10" in message


def test_a_wheel_the_evaluations_python_cannot_install_is_refused_naming_the_runtime_image(
    tmp_path,
):
    # The training image's CPython 3.10 takes it; the evaluation installs it on 3.11.
    extras = _extras(tmp_path, "fastops-1.0-cp310-cp310-manylinux2014_x86_64.whl")
    with pytest.raises(PackageUrisError, match=r"pip in kfp-spot's runtime image, where the "):
        check_package_uris(extras, PYTORCH_IMAGE)


@pytest.mark.parametrize(
    "name",
    [
        "plain-1.0-py3-none-any.whl",
        "fastops-1.0-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "dep-1.0.tar.gz",
    ],
)
def test_a_wheel_both_images_install_and_an_sdist_pass(tmp_path, name):
    assert check_package_uris(_extras(tmp_path, name), DEFAULT_EXECUTOR_IMAGE) == [
        str(tmp_path / name)
    ]


def test_a_cpython_wheel_of_the_images_version_is_installed():
    name = "fastops-1.0-cp310-cp310-manylinux_2_28_x86_64.whl"
    assert unsupported_reason(name, "3.10", "here") is None
    assert "CPython 3.11" in (unsupported_reason(name, "3.11", "there") or "")
