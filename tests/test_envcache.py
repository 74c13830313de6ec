"""Package environments: cached by content and by the host environment they see."""

import subprocess
import sys
import textwrap
import zipfile

from kfp_spot import envcache


def _wheel(tmp_path, version="0.1"):
    path = tmp_path / f"probe_pkg-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("probe_pkg/__init__.py", f"VERSION = {version!r}\n")
        whl.writestr(
            f"probe_pkg-{version}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: probe-pkg\nVersion: {version}\n",
        )
        whl.writestr(
            f"probe_pkg-{version}.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        whl.writestr(f"probe_pkg-{version}.dist-info/RECORD", "")
    return path


def test_env_sees_the_package_and_this_hosts_site_packages(tmp_path):
    python = envcache.package_env([str(_wheel(tmp_path))], tmp_path / "cache")
    code = "import probe_pkg, kfp_spot; print(probe_pkg.VERSION, kfp_spot.__file__)"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    version, kfp_spot_file = out.stdout.split()
    assert version == "0.1"
    import kfp_spot

    assert kfp_spot_file == kfp_spot.__file__  # the host's kfp_spot, not another copy


def test_same_packages_reuse_one_env_other_hosts_get_their_own(tmp_path):
    wheel = _wheel(tmp_path)
    first = envcache.package_env([str(wheel)], tmp_path / "cache")
    again = envcache.package_env([str(wheel)], tmp_path / "cache")
    assert first == again
    # Another interpreter environment sharing the cache must not reuse an env that points at
    # this one's site-packages.
    other = tmp_path / "other-venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(other)],
        check=True,
    )
    here = envcache.site_packages_of(sys.executable)
    script = textwrap.dedent(
        f"""
        import site
        site.addsitedir({str(here)!r})  # this project's code, seen from the other venv
        from kfp_spot import envcache
        print(envcache.package_env([{str(wheel)!r}], {str(tmp_path / "cache")!r}))
        """
    )
    out = subprocess.run(
        [str(other / "bin" / "python"), "-c", script], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() != str(first)
