# SPDX-License-Identifier: Apache-2.0
"""Where the collection ct200.deploy is, for the `ct200` command and the playbooks it runs.

Two ways, tried in this order:

* **a checkout**: this package sits in the repository, which is itself the collection (its
  ``collections/`` holds a symlink ``ansible_collections/ct200/deploy`` to the root); the
  checkout's ``ansible.cfg`` applies, as it does for ``ansible-playbook`` typed there;
* **installed**: ``pip install`` put this package in a venv and ``ansible-galaxy collection
  install`` put the collection in a collections path. ansible's own collection listing finds it
  over ``ANSIBLE_COLLECTIONS_PATH``/``collections_path`` and the default paths, exactly where
  ``ansible-playbook ct200.deploy.deploy_kimi`` would; the operator's own configuration applies.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

NAME = "ct200.deploy"


class CollectionNotFound(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Collection:
    root: Path                # the collection's directory: playbooks/, plugins/, roles/
    config: Path | None       # the checkout's ansible.cfg; None when installed
    collections_dir: Path     # the directory holding ansible_collections/ct200/deploy

    @property
    def checkout(self) -> bool:
        return self.config is not None

    def playbook(self, name: str) -> str:
        return str(self.root / "playbooks" / name)


def _checkout() -> Collection | None:
    repo = Path(__file__).resolve().parent.parent
    link = repo / "collections" / "ansible_collections" / "ct200" / "deploy"
    if (repo / "galaxy.yml").is_file() and (repo / "ansible.cfg").is_file() and link.is_dir():
        return Collection(root=repo, config=repo / "ansible.cfg", collections_dir=repo / "collections")
    return None


def _installed() -> Collection:
    # As ansible's own commands do: its collection loader over the configured paths
    # (ANSIBLE_COLLECTIONS_PATH, ansible.cfg, the defaults), then its listing of them.
    from ansible.collections.list import list_collections
    from ansible.plugins.loader import init_plugin_loader
    init_plugin_loader()
    found = list_collections(coll_filter=NAME)
    if NAME not in found:
        raise CollectionNotFound(
            "the collection %s is not installed in any collections path ansible searches (%s): install it with "
            "`ansible-galaxy collection install ct200-deploy-<version>.tar.gz` or set ANSIBLE_COLLECTIONS_PATH"
            % (NAME, os.pathsep.join(_search_paths())))
    root = Path(os.fsdecode(found[NAME])).resolve()
    return Collection(root=root, config=None, collections_dir=root.parents[2])


def _search_paths() -> list[str]:
    from ansible import constants as C
    return [str(p) for p in C.COLLECTIONS_PATHS]


def locate() -> Collection:
    collection = _checkout() or _installed()
    # The CLI shares the collection's one file writer (module_utils._io), imported by its FQCN.
    if str(collection.collections_dir) not in sys.path:
        sys.path.insert(0, str(collection.collections_dir))
    return collection
