# SPDX-License-Identifier: Apache-2.0
"""The tree `ansible-test sanity` runs in, and the command to run it (tests/unit/test_docs_and_lint.py).

ansible-test needs the collection at ansible_collections/NS/NAME in a git tree: the checkout's
tracked (and unignored) files are copied there, next to the community.docker it depends on. Its
venvs (pylint, validate-modules, ...) live in .cache/ansible-test-home, kept between runs;
``python tests/support/sanity_tree.py --prime-venvs`` (scripts/bootstrap.sh) creates them ahead,
as the bootstrap installs the other tools the suite runs, so the suite's sanity test only tests.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HOME = REPO / ".cache" / "ansible-test-home"  # a private HOME: ansible-test's venv cache, the pip bootstrap


def collection_tree(parent: Path) -> Path:
    """PARENT/ansible_collections/ct200/deploy, a git tree of the checkout's files."""
    import ansible_collections.community.docker as community_docker

    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.split("\n")
    root = parent / "ansible_collections"
    dest = root / "ct200" / "deploy"
    for rel in filter(None, listed):
        src = REPO / rel
        if rel.startswith("collections/") or not src.is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    (root / "community").mkdir()
    (root / "community" / "docker").symlink_to(Path(community_docker.__path__[0]))
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    return dest


def ansible_test_pip() -> str:
    """The pip version ansible-test bootstraps its sanity venvs with (it names the cached script)."""
    import ansible_test

    source = (Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
    return re.search(r"pip='([0-9.]+)'", source).group(1)


def sanity(dest: Path, *args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    """`ansible-test sanity ARGS` in DEST, with the private HOME and the project's pip bootstrap."""
    cache = HOME / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / "tests" / "support" / "ansible_test_get_pip.py",
                 cache / ("get_pip_%s.py" % ansible_test_pip().replace(".", "_")))
    env = dict(os.environ, HOME=str(HOME), PATH=str(BIN) + os.pathsep + os.environ["PATH"])
    env.pop("ANSIBLE_CONFIG", None)
    return subprocess.run([str(BIN / "ansible-test"), "sanity", "--python", "%d.%d" % sys.version_info[:2], *args],
                          cwd=dest, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def main() -> int:
    if sys.argv[1:] != ["--prime-venvs"]:
        print("usage: sanity_tree.py --prime-venvs", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ct200-sanity-") as tmp:
        res = sanity(collection_tree(Path(tmp)), "--prime-venvs")
    if res.returncode != 0:
        print((res.stdout + res.stderr)[-5000:], file=sys.stderr)
    return res.returncode


if __name__ == "__main__":
    sys.exit(main())
