# SPDX-License-Identifier: Apache-2.0
"""The sandbox hosts' cache of the code zipimport compiles (tests/support/sandbox/ct200_sandbox_zipcache.py):
an import from a zip gives the same module with or without it, and under the path of the zip it came from;
an entry it cannot trust (another user's directory, a truncated file) is compiled anew, not run."""

import importlib.util
import os
import subprocess
import sys
import zipfile
import zipimport
from pathlib import Path

import pytest

SANDBOX_DIR = Path(__file__).resolve().parents[1] / "support" / "sandbox"
SOURCE = (b"import os\nVALUE = 41 + 1\n\ndef where():\n    return where.__code__.co_filename\n\n"
          b"class Box:\n    def m(self):\n        return 1 / 0\n")


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    """The module loaded under a private name with its root in TMP_PATH; zipimport is put back after."""
    original = zipimport._compile_source
    spec = importlib.util.spec_from_file_location("zipcache_under_test", SANDBOX_DIR / "ct200_sandbox_zipcache.py")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
        root = tmp_path / "cache"
        root.mkdir(mode=0o1777)
        os.chmod(root, 0o1777)
        monkeypatch.setattr(mod, "CACHE_ROOT", str(root))
        yield mod
    finally:
        zipimport._compile_source = original


def import_from_zip(tmp_path, name, source=SOURCE):
    archive = tmp_path / (name + ".zip")
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(name + ".py", source)
    sys.path.insert(0, str(archive))
    try:
        return importlib.import_module(name), archive
    finally:
        sys.path.remove(str(archive))
        sys.modules.pop(name, None)
        sys.path_importer_cache.pop(str(archive), None)


def entries(cache):
    own = Path(cache.CACHE_ROOT) / str(os.geteuid())
    return sorted(own.iterdir()) if own.is_dir() else []


def test_the_second_import_runs_the_cached_code_under_its_own_zips_path(cache, tmp_path):
    assert zipimport._compile_source is cache.compile_source
    first, archive1 = import_from_zip(tmp_path, "alpha")
    assert first.VALUE == 42 and len(entries(cache)) == 1
    stored = entries(cache)[0].stat().st_mtime_ns
    second, archive2 = import_from_zip(tmp_path, "beta")  # same bytes, another zip: the entry is used
    assert second.VALUE == 42 and entries(cache)[0].stat().st_mtime_ns == stored and len(entries(cache)) == 1
    assert second.where() == str(archive2 / "beta.py") != first.where()
    with pytest.raises(ZeroDivisionError) as info:
        second.Box().m()
    # a traceback names this zip, also from a nested code object (a method)
    assert str(info.traceback[-1].path) == str(archive2 / "beta.py")
    assert oct(os.stat(entries(cache)[0].parent).st_mode & 0o777) == "0o700"


def test_a_truncated_entry_is_compiled_anew(cache, tmp_path):
    import_from_zip(tmp_path, "gamma")
    entry = entries(cache)[0]
    entry.write_bytes(entry.read_bytes()[:20])
    again = import_from_zip(tmp_path, "delta")[0]
    assert again.VALUE == 42
    assert len(entry.read_bytes()) > 20  # rewritten whole


def test_a_directory_others_may_write_is_not_used(cache, tmp_path):
    own = Path(cache.CACHE_ROOT) / str(os.geteuid())
    own.mkdir(mode=0o777)
    os.chmod(own, 0o777)
    planted = cache._entry(SOURCE)
    Path(planted).write_bytes(b"not a code object")
    module = import_from_zip(tmp_path, "epsilon")[0]
    assert module.VALUE == 42
    assert Path(planted).read_bytes() == b"not a code object"  # neither read nor replaced


def test_the_rootfs_build_installs_it_for_every_interpreter_of_the_tree(tmp_path):
    root = tmp_path / "root"
    lib = root / "usr" / "lib" / "python3.11"
    lib.mkdir(parents=True)
    (lib / "os.py").write_text("")
    (root / "etc" / "python3.11").mkdir(parents=True)
    (root / "etc" / "python3.11" / "sitecustomize.py").write_text("# Debian's\n")
    subprocess.run([str(SANDBOX_DIR / "install-zipcache.sh"), str(root)], check=True, timeout=30)
    assert (lib / "ct200_sandbox_zipcache.py").read_bytes() == (SANDBOX_DIR / "ct200_sandbox_zipcache.py").read_bytes()
    site = (root / "etc" / "python3.11" / "sitecustomize.py").read_text()
    assert site.startswith("# Debian's\n") and "    import ct200_sandbox_zipcache\n" in site
    assert oct((root / "var" / "cache" / "ct200-zipimport").stat().st_mode & 0o7777) == "0o1777"
    empty = tmp_path / "empty"
    empty.mkdir()
    res = subprocess.run([str(SANDBOX_DIR / "install-zipcache.sh"), str(empty)], capture_output=True, text=True,
                         timeout=30, check=False)
    assert res.returncode == 1 and "no python3 standard library" in res.stderr


def test_the_built_rootfs_loads_it():
    rootfs = os.environ.get("CT200_SANDBOX_ROOTFS", "/var/lib/ct200-sandbox/rootfs")
    if os.geteuid() != 0 or not os.access(os.path.join(rootfs, "usr/bin/python3"), os.X_OK):
        pytest.skip("no sandbox rootfs to chroot into (tests/support/sandbox/build-rootfs.sh)")
    res = subprocess.run(["chroot", rootfs, "python3", "-c",
                          "import sys, zipimport; print(zipimport._compile_source.__module__)"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.stdout.strip() == "ct200_sandbox_zipcache", res.stderr
