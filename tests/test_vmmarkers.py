"""Declared requirements chosen by their markers for the training VM, not for this machine."""

import pytest

from kfp_spot import envcache, executors, vmmarkers

VM = vmmarkers.image_environment("3.10")
MAC = {
    **VM,
    "python_version": "3.10",
    "python_full_version": "3.10.14",
    "sys_platform": "darwin",
    "platform_system": "Darwin",
    "platform_machine": "arm64",
}


def test_a_mac_only_requirement_is_left_out_and_a_linux_only_one_is_installed():
    chosen = vmmarkers.for_vm(
        [
            "numpy>=1.26",
            'tensorflow-macos==2.15; sys_platform == "darwin"',
            'foo[gpu]>=1; platform_machine == "arm64"',
            'tensorflow-cpu==2.15; sys_platform == "linux"',
            'bar; platform_machine == "x86_64" and python_version >= "3.10"',
            'docs-tool; extra == "docs"',
        ],
        VM,
        MAC,
    )
    assert chosen.install == ("numpy>=1.26", "tensorflow-cpu==2.15", "bar")
    assert chosen.host_only == (
        'tensorflow-macos==2.15; sys_platform == "darwin"',
        'foo[gpu]>=1; platform_machine == "arm64"',
    )
    assert chosen.vm_only == (
        'tensorflow-cpu==2.15; sys_platform == "linux"',
        'bar; platform_machine == "x86_64" and python_version >= "3.10"',
    )


def test_extras_and_urls_are_kept_with_the_marker_resolved():
    chosen = vmmarkers.for_vm(
        ['torch[cuda]>=2; sys_platform == "linux"', 'lib @ https://x/lib.whl ; os_name == "posix"'],
        VM,
        MAC,
    )
    assert chosen.install == ("torch[cuda]>=2", "lib @ https://x/lib.whl")


def _meta(name, version):
    return envcache.WheelMeta(
        path=envcache.Path(f"{name}-{version}-py3-none-any.whl"),
        name=name,
        version=version,
        requires_python="",
        requires=(),
    )


SKLEARN = executors.profile("us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest")


def test_an_environment_installs_what_the_vm_installs_besides_its_own_packages():
    own = {"mylib": _meta("mylib", "1.0")}
    chosen = envcache.requirements_on_vm(
        ["mylib>=1", 'pandas; sys_platform == "linux"', 'appnope; sys_platform == "darwin"'],
        SKLEARN,
        own,
        host=MAC,
    )
    assert chosen.install == ("pandas",)


def test_an_extra_asked_of_an_own_package_brings_its_requirements_for_the_vm():
    lib = envcache.WheelMeta(
        path=envcache.Path("mylib-1.0-py3-none-any.whl"),
        name="mylib",
        version="1.0",
        requires_python="",
        requires=(
            "numpy",
            'gpu-lib>=2; extra == "gpu"',
            'metal-lib; extra == "gpu" and sys_platform == "darwin"',
            'docs-lib; extra == "docs"',
        ),
    )
    chosen = envcache.requirements_on_vm(
        ["mylib[gpu]", *lib.requires], SKLEARN, {"mylib": lib}, host=MAC
    )
    assert chosen.install == ("numpy", "gpu-lib>=2")


def test_a_requirement_on_an_own_package_it_does_not_satisfy_is_refused():
    with pytest.raises(envcache.PackageInstallError, match=r"'mylib>=2' is required and mylib 1.0"):
        envcache.requirements_on_vm(["mylib>=2"], SKLEARN, {"mylib": _meta("mylib", "1.0")})


def test_a_file_requirement_is_refused_where_its_marker_holds_on_the_vm():
    meta = envcache.WheelMeta(
        path=envcache.Path("job-0.1-py3-none-any.whl"),
        name="job",
        version="0.1",
        requires_python="",
        requires=(
            'maconly @ file:///Users/a/maconly ; sys_platform == "darwin"',
            'mylib @ file:///Users/a/mylib ; sys_platform == "linux"',
        ),
    )
    refusal = envcache.local_file_refusal(meta, SKLEARN)
    assert refusal is not None and "mylib @ file:///Users/a/mylib" in refusal


def test_a_marker_the_images_patch_release_decides_is_left_to_pip_on_the_vm():
    """Which 3.10.x an image holds is recorded nowhere: ``3.10.0`` decided for it.

    ``python_full_version >= "3.10.4"`` was false for the VM, so a requirement pip there installs
    was left out of the environment that stands for it, and the one below was installed.
    """
    chosen = vmmarkers.for_vm(
        [
            'late-fix>=2; python_full_version >= "3.10.4"',
            'early-pin==1; python_full_version < "3.10.4"',
            'any-310; python_full_version >= "3.10"',
            'not-on-310; python_full_version < "3.10"',
        ],
        VM,
        MAC,
    )
    assert chosen.install == (
        'late-fix>=2; python_full_version >= "3.10.4"',
        'early-pin==1; python_full_version < "3.10.4"',
        "any-310",
    )
    assert chosen.vm_only == () and chosen.host_only == ()
