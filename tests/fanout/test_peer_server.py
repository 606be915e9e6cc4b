# SPDX-License-Identifier: Apache-2.0
"""The weight_peer nginx configuration (the role's own template) on Debian's nginx, in a namespace:
200 only for files renamed into place, never a dot path, no listing, read-only, no symlink."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fanout.netns_site import PEER_PORT, render_nginx_conf

GET = ("import sys,urllib.request as u\n"
       "r=u.Request(sys.argv[1],method=sys.argv[2],data=(b'x' if sys.argv[2] in ('POST','PUT') else None))\n"
       "try:\n  resp=u.urlopen(r,timeout=5);print(resp.status);sys.stdout.flush();sys.stdout.buffer.write(resp.read())\n"
       "except u.HTTPError as e:\n  print(e.code)\n")


def ask(site, path, method="GET", host="h0"):
    out = subprocess.run(site.exec_argv("h1", [sys.executable, "-c", GET,
                                               "http://%s:%d%s" % (site.ip(host), PEER_PORT, path), method]),
                         capture_output=True, timeout=30, check=False)
    status, _nl, body = out.stdout.partition(b"\n")
    return int(status or 0), body


@pytest.fixture
def served(fresh_site):
    root = fresh_site.local_dir("h0")
    os.makedirs(os.path.join(root, ".ct200", "tmp"))
    os.makedirs(os.path.join(root, "sub"))
    files = {"model-1.safetensors": b"verified", "sub/w.bin": b"nested", ".ct200/manifest.json": b"{}",
             ".ct200/tmp/abc.part": b"partial", ".model-2.safetensors.1a2b.ct200tmp": b"temp",
             ".gitattributes": b"*.bin lfs", "sub/.hidden": b"h"}
    for rel, data in files.items():
        with open(os.path.join(root, rel), "wb") as handle:
            handle.write(data)
        os.chmod(os.path.join(root, rel), 0o644)
    with open(os.path.join(root, ".ct200", "progress.json"), "w") as handle:
        json.dump({"state": "running", "bytes_done": 5}, handle)
    os.chmod(os.path.join(root, ".ct200", "progress.json"), 0o644)
    os.symlink("/etc/passwd", os.path.join(root, "link.json"))
    return fresh_site


def test_verified_files_are_served(served):
    assert ask(served, "/model/model-1.safetensors") == (200, b"verified")
    assert ask(served, "/model/sub/w.bin") == (200, b"nested")


@pytest.mark.parametrize("path", ["/model/.ct200/manifest.json", "/model/.ct200/tmp/abc.part",
                                  "/model/.model-2.safetensors.1a2b.ct200tmp", "/model/.gitattributes",
                                  "/model/sub/.hidden", "/model/%2Ect200/manifest.json",
                                  "/model/sub/../.ct200/manifest.json"])
def test_dot_paths_are_never_served(served, path):
    assert ask(served, path)[0] == 404


def test_no_directory_listing(served):
    status, body = ask(served, "/model/")
    assert status in (403, 404) and b"model-1" not in body


def test_symlinks_are_not_followed(served):
    status, body = ask(served, "/model/link.json")
    assert status in (403, 404) and b"root:" not in body


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_read_only(served, method):
    assert ask(served, "/model/model-1.safetensors", method)[0] == 405


def test_only_the_model_prefixes_exist(served):
    assert ask(served, "/etc/passwd")[0] == 404
    assert ask(served, "/")[0] == 404


def test_progress_is_published_for_liveness(served):
    status, body = ask(served, "/_ct200/model/progress.json")
    assert status == 200 and json.loads(body)["bytes_done"] == 5


def test_a_file_appears_only_when_renamed_into_place(served):
    root = served.local_dir("h0")
    assert ask(served, "/model/model-3.safetensors")[0] == 404
    os.rename(os.path.join(root, ".ct200", "tmp", "abc.part"), os.path.join(root, "model-3.safetensors"))
    assert ask(served, "/model/model-3.safetensors") == (200, b"partial")


def test_bound_to_the_site_address_only(served):
    """Nothing listens on the wildcard or loopback: the server is only on the site network address."""
    out = subprocess.run(served.exec_argv("h0", ["ss", "-Hltn"]), capture_output=True, text=True, timeout=10,
                         check=False).stdout
    listening = [line.split()[3] for line in out.splitlines() if line.split()[3].endswith(":%d" % PEER_PORT)]
    assert listening == ["%s:%d" % (served.ip("h0"), PEER_PORT)]


def test_template_carries_no_credential_and_hardening():
    text = render_nginx_conf("10.0.0.1", [{"name": "m", "path": "/models/m"}], "/var/lib/x").lower()
    assert "authorization" not in text and "hf_" not in text and "bearer" not in text
    assert "autoindex off" in text and "disable_symlinks on" in text and "server_tokens off" in text
