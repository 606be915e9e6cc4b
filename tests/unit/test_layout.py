# SPDX-License-Identifier: Apache-2.0
"""The product tree is the product: test infrastructure lives under tests/, and every script says its licence.

The repository root is the collection ct200.deploy. The local Hub, the sandbox tooling, the SGLang
stand-in and ansible-test's pip bootstrap are test infrastructure and live in tests/support/.
"""

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUPPORT = "tests/support/"
# Where the test infrastructure lives now (a file each move must have produced).
MOVED = {
    "localhub/": SUPPORT + "localhub/__init__.py",
    "scripts/sandbox.sh": SUPPORT + "sandbox/sandbox.sh",
    "scripts/sandbox.py": SUPPORT + "sandbox/sandbox.py",
    "scripts/build-rootfs.sh": SUPPORT + "sandbox/build-rootfs.sh",
    "tools/sglang_standin/": SUPPORT + "sglang_standin/sglang_standin.py",
    "tools/ansible_test_get_pip.py": SUPPORT + "ansible_test_get_pip.py",
}
# A reference to an old location, in prose or as a path built in Python.
STALE_REFERENCE = re.compile(
    r"(?<![\w/.-])(?:scripts/(?:sandbox\.(?:sh|py)|build-rootfs\.sh)|tools/(?:sglang_standin|ansible_test_get_pip))"
    r"|\"scripts\"\s*[/,]\s*\"(?:sandbox|build-rootfs)|\"tools\"\s*[/,]"
    r"|(?<![\w/.-])localhub/(?:README\.md|[a-z_]+\.py)")
SPDX = "# SPDX-License-Identifier: Apache-2.0"
SHELL_SHEBANG = re.compile(r"#!\s*(?:/usr/bin/env\s+)?(?:/usr)?(?:/bin/)?(?:ba)?sh\b")


def _tracked():
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60).stdout
    return [rel for rel in out.decode().split("\0") if rel]


@pytest.fixture(scope="module")
def tracked():
    return _tracked()


def _is_script(rel):
    path = REPO / rel
    if path.is_symlink() or not path.is_file():
        return False
    if rel.endswith((".py", ".sh")):
        return True
    with open(path, "rb") as fh:
        return bool(SHELL_SHEBANG.match(fh.readline().decode("utf-8", "replace")))


def _header(text):
    """The leading comment block (shebang, coding line, copyright, licence) before any code."""
    lines = []
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            break
        lines.append(line.strip())
    return lines


def test_top_level_holds_no_test_infrastructure(tracked):
    at_top = sorted(rel for rel in tracked for old in MOVED if rel == old or (old.endswith("/") and rel.startswith(old)))
    assert at_top == [], "test infrastructure outside tests/: %s" % at_top
    assert not [rel for rel in tracked if rel.startswith(("localhub/", "tools/"))]
    assert not [rel for rel in tracked if re.match(r"scripts/(sandbox|build-rootfs)", rel)]


def test_test_infrastructure_is_in_tests_support(tracked):
    missing = sorted(new for new in MOVED.values() if new not in tracked)
    assert missing == []


def test_localhub_is_its_own_test_only_distribution():
    """The product's distribution holds the fleet command only; the local Hub is a distribution of its
    own under tests/support (ct200-testsupport), still importable as `localhub`."""
    product = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert product["tool"]["setuptools"]["packages"] == ["ct200_fleet"]
    assert "package-dir" not in product["tool"]["setuptools"]
    assert set(product["project"]["scripts"]) == {"ct200"}
    support = tomllib.loads((REPO / SUPPORT / "pyproject.toml").read_text())
    assert support["tool"]["setuptools"]["packages"] == ["localhub"]
    assert support["project"]["scripts"]["ct200-localhub"] == "localhub.server:main"
    assert (REPO / SUPPORT / "localhub" / "__init__.py").is_file()
    import localhub
    assert Path(localhub.__file__).resolve() == REPO / SUPPORT / "localhub" / "__init__.py"


def test_no_reference_to_an_old_location(tracked):
    me = str(Path(__file__).resolve().relative_to(REPO))
    stale = []
    for rel in tracked:
        path = REPO / rel
        if rel == me or path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        for lineno, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if STALE_REFERENCE.search(line):
                stale.append("%s:%d: %s" % (rel, lineno, line.strip()))
    assert stale == []


def test_every_script_carries_an_spdx_header(tracked):
    scripts = [rel for rel in tracked if _is_script(rel)]
    assert "plugins/modules/hf_download.py" in scripts and "scripts/bootstrap.sh" in scripts
    assert ".ci/run" in scripts  # shell scripts without an extension count too
    lacking = sorted(rel for rel in scripts if SPDX not in _header((REPO / rel).read_text(errors="replace")))
    assert lacking == []


def test_the_stale_reference_pattern_catches_the_old_spellings():
    old = ['REPO / "scripts" / "sandbox.sh"', "run scripts/build-rootfs.sh", "tools/sglang_standin/x.py",
           'os.path.join(REPO, "tools", "sglang_standin")', "see `localhub/README.md`", "scripts/sandbox.py"]
    new = ['REPO / "tests" / "support" / "sandbox" / "sandbox.sh"', "tests/support/sandbox/build-rootfs.sh",
           "tests/support/sglang_standin/x.py", "tests/support/localhub/README.md", "tests/localhub/conftest.py",
           "scripts/sglang-wheelhouse.sh", "python -m localhub serve"]
    assert [s for s in old if not STALE_REFERENCE.search(s)] == []
    assert [s for s in new if STALE_REFERENCE.search(s)] == []
