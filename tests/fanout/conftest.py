# SPDX-License-Identifier: Apache-2.0
"""An 8-host site in network namespaces (see netns_site.py) shared by the fan-out tests."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.fanout.netns_site import Site

REPO_ID = "fo/site"
REPO_SPEC = REPO_ID + ":8x1MiB"


def _netns_possible():
    return os.geteuid() == 0 and shutil.which("ip") and shutil.which("tc")


@pytest.fixture(scope="session")
def fo_site(tmp_path_factory):
    if not _netns_possible():
        pytest.skip("needs root, ip and tc to build network namespaces")
    data = tmp_path_factory.mktemp("fo-hub")
    site = Site("t%d" % (os.getpid() % 10000), hosts=8, host_rate="100mbit", hub_rate="40mbit")
    with site:
        site.start_hub(REPO_SPEC, str(data))
        commit, files = site.listing(REPO_ID)
        site.commit, site.files = commit, files
        yield site


@pytest.fixture
def fresh_site(fo_site):
    """Every host empty with its peer server running; the Hub's counters at zero."""
    for host in fo_site.hosts:
        fo_site.stop_nginx(host)
        fo_site.wipe(host)
        fo_site.start_nginx(host)
    fo_site.hub_admin("/_admin/stats/reset", "POST")
    return fo_site
