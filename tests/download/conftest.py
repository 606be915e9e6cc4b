# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the hf_download tests: one local Hub over real HTTP for the session.

Repos (generated once, deterministic, non-compressible content):

* ``ct200test/weights`` -- public: two small JSON files (git blobs), three
  safetensors shards (LFS, 3/6/24 MiB), a nested LFS file and an empty file;
* ``ct200test/gated`` -- gated=manual copy of a small repo;
* ``ct200test/big`` -- two 48 MiB shards, for kill/resume and stall tests.
"""

from __future__ import annotations

import pytest

from dlhelpers import BIG, GATED, WEIGHTS, WEIGHTS_FILES
from localhub import LocalHub


@pytest.fixture(scope="session")
def dl_hub(tmp_path_factory):
    data = tmp_path_factory.mktemp("dl-hub")
    hub = LocalHub(str(data), include_defaults=False)
    hub.add_repo(WEIGHTS, dict(WEIGHTS_FILES))
    hub.add_repo(GATED, {"config.json": {"model_type": "drafter"}, "model.safetensors": "5MiB"}, gated="manual")
    hub.add_repo(BIG, {"model-00001-of-00002.safetensors": "48MiB", "model-00002-of-00002.safetensors": "48MiB"})
    hub.start()
    yield hub
    hub.stop()


@pytest.fixture()
def hub(dl_hub):
    """The session hub with clean faults, counters and access rules for each test."""
    dl_hub.clear_faults()
    dl_hub.clear_hostile()
    dl_hub.reset_stats()
    yield dl_hub
    dl_hub.clear_faults()
    dl_hub.clear_hostile()
    dl_hub.lfs_redirect = dl_hub.honour_range = True
    dl_hub.cdn_expiry, dl_hub.redirect_cache = None, 0.0
    dl_hub.xet = dl_hub.xet_without_lfs = False
