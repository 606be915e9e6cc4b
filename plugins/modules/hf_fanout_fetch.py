#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hf_fanout_fetch
short_description: Fetch a Hugging Face repository from the site's peers, verified against the Hub's listing
version_added: "0.2.0"
description:
  - Site fan-out of model weights. One host (the seed) lists the repository at the Hub once (O(mode=list))
    and downloads it from the Hub (M(ct200.deploy.hf_download)); every other host runs this module with
    O(mode=fetch) and the listing, and takes the bytes from its peers over the LAN.
  - B(Topology.) The hosts of O(peers), seed first, form a tree. The seed has O(seed_fanout) children (hosts
    C(1..seed_fanout)), every other host O(fanout), host C(i > seed_fanout) has parent
    C((i-seed_fanout-1)//fanout+1); O(fanout=1) is a chain (10 GbE), 2 a binary tree (25 GbE), more for faster
    links.
  - B(Files) are taken in the order the seed fetches them, the files stored in git (configs, the index,
    tokenizer settings) first, then the LFS files, each in path order.
  - B(Sources per file), in this order, are the parent (waited for while it makes progress, so a child starts a file
    as soon as its parent has verified it), any other peer that has the file, the seed (waited for), and the Hub
    when O(use_hub) is true. A source that refuses connections is dropped for the run; one whose bytes do not
    hash to the listed oid is dropped for that file (it costs that file once).
  - B(Siblings one after another.) A child whose parent has an earlier child takes each file from the parent
    only once that sibling has it (while the sibling's progress moves; one that is down or stands still for 3 s is
    not waited for again). Two copies side by side share the parent's uplink and both end after two copies' time,
    one after the other the first ends after one and its own children start earlier.
  - B(The last file by doubling.) The last file of at least 1 MiB in that order does not follow the tree. Once
    the seed has it nothing else is in flight, so every host that has it sends it on (host C(i) takes it from
    C(i) less its highest bit, one sender's receivers one after another), and the hosts that have it double with each
    copy's time, and it reaches a site of N hosts after log2(N) copies instead of one per edge of the tree's
    deepest path. Its other sources stay as above.
  - B(Verification from the Hub, never from a peer.) Every file is hashed while it is written and renamed into
    place only when its sha256 (or git blob sha1) equals the oid of O(files), which must come from the seed's
    Hub listing. Bytes move through the same engine and manifest as M(ct200.deploy.hf_download) (resumable part
    files in C(<local_dir>/.ct200/tmp), stall watchdog, progress in C(<local_dir>/.ct200/progress.json)); a
    later M(ct200.deploy.hf_download) of the same commit is a no-op.
  - Peers are served by the C(ct200.deploy.weight_peer) role (nginx-light), which never shows a file before it is
    verified. No token is sent to a peer.
author: ct200-deploy developers (@ct200-deploy)
options:
  mode:
    description: C(list) returns the Hub listing (run it on the seed); C(fetch) fetches from the peers.
    type: str
    choices: [list, fetch]
    default: fetch
  repo_id:
    description: Repository id, C(org/name).
    type: str
    required: true
  repo_type:
    description: Repository type.
    type: str
    choices: [model, dataset, space]
    default: model
  local_dir:
    description: Directory the repository is (or will be) in; the same layout as M(ct200.deploy.hf_download).
    type: path
    required: true
  revision:
    description: O(mode=list) only. Branch, tag or commit to list; the result's RV(commit) pins every host.
    type: str
    default: main
  allow_patterns:
    description: O(mode=list) only. Only files matching one of these fnmatch patterns.
    type: list
    elements: str
  ignore_patterns:
    description: O(mode=list) only. Files matching one of these patterns are left out.
    type: list
    elements: str
  commit:
    description: O(mode=fetch). The 40-hex commit of the listing.
    type: str
  files:
    description:
      - O(mode=fetch). The listing from O(mode=list) on the seed, unchanged (path -> size, oid, lfs).
        It is the only source of expected hashes; nothing a peer says is trusted.
    type: dict
  peers:
    description:
      - O(mode=fetch). Every host of the site in inventory order, as C({name, url}) with C(url) the base URL
        of its weight_peer server for this repository (C(http://ADDR:PORT/NAME)). A URL with credentials
        (C(user:password@)) is refused, as a weight_peer server takes none.
    type: list
    elements: dict
  host:
    description: O(mode=fetch). Name (in O(peers)) of the host this runs on.
    type: str
  seed:
    description: O(mode=fetch). Name of the seed host. Defaults to the first of O(peers).
    type: str
  fanout:
    description: O(mode=fetch). Children per host (1 = chain).
    type: int
    default: 1
  seed_fanout:
    description:
      - O(mode=fetch). Children of the seed; O(seed_fanout=fanout) gives the plain k-ary tree. The
        C(ct200.deploy.model_weights) role passes 2, which measured faster than 1 behind a Hub link slower
        than the hosts' (the seed's uplink carries only copies, its Hub download comes in on the other direction).
    type: int
    default: 1
  use_hub:
    description: O(mode=fetch). Fall back to the Hub itself after every peer and the seed failed.
    type: bool
    default: false
  endpoint:
    description: Hub endpoint (O(mode=list), and the Hub fallback). Defaults to C($HF_ENDPOINT), else U(https://huggingface.co).
    type: str
  token:
    description:
      - Hugging Face token for O(mode=list) and the Hub fallback. Never sent to a peer, logged or returned.
    type: str
  peer_wait_timeout:
    description: O(mode=fetch). Longest wait, in seconds, for the parent or the seed to have one file (0 or more).
    type: float
    default: 3600
  peer_stall_timeout:
    description:
      - O(mode=fetch). A parent or seed that lacks a file and whose published progress has not changed for this
        many seconds is given up for that file (the next source is tried). 0 or more; a negative value is refused.
    type: float
    default: 60
  poll_interval:
    description: O(mode=fetch). Seconds between two checks whether a peer has a file yet.
    type: float
    default: 0.2
  stall_timeout:
    description:
      - Seconds without a single new byte after which a transfer from a source is abandoned.
      - The option of M(ct200.deploy.hf_download), with its default.
    type: float
    default: 60
  max_workers:
    description:
      - O(mode=fetch). Parallel byte ranges of one big file from one source.
      - The option of M(ct200.deploy.hf_download), with its default.
    type: int
    default: 8
  parallel_files:
    description:
      - O(mode=fetch). Files in flight at once at most (taken in that order), so the per-file round trips of the
        pipeline overlap. The next file starts only when those in flight have less than 1 MiB left, so files
        complete one after another and this host's children can take each early.
    type: int
    default: 4
  lock_timeout:
    description:
      - O(mode=fetch). Seconds to wait when another M(ct200.deploy.hf_download) or M(ct200.deploy.hf_fanout_fetch)
        holds the lock on O(local_dir). The lock is taken before anything is planned; C(0) fails at once with
        code C(busy).
    type: float
    default: 0
  min_free_bytes:
    description:
      - O(mode=fetch). Free space to keep on the filesystem of O(local_dir) after the download, checked (as by
        M(ct200.deploy.hf_download)) before any byte moves; C(disk_full) names the shortfall. Bytes (int) or a
        size string such as C(10GB) or C(512MiB).
    type: raw
    default: 10GB
extends_documentation_fragment:
  - ct200.deploy.hf_layout
notes:
  - Check mode (O(mode=fetch)) reports the files that would be fetched and writes nothing.
"""

EXAMPLES = r"""
- name: List the repository once, on the seed
  ct200.deploy.hf_fanout_fetch:
    mode: list
    repo_id: moonshotai/Kimi-K2.6
    revision: main
    local_dir: /models/moonshotai/Kimi-K2.6
  register: listing
  run_once: true
  delegate_to: "{{ ansible_play_hosts_all[0] }}"

- name: Fetch from the peers (the seed runs ct200.deploy.hf_download at the same time)
  ct200.deploy.hf_fanout_fetch:
    repo_id: moonshotai/Kimi-K2.6
    local_dir: /models/moonshotai/Kimi-K2.6
    commit: "{{ listing.commit }}"
    files: "{{ listing.files }}"
    peers: >-
      {%- set out = [] -%}
      {%- for h in ansible_play_hosts_all -%}
      {%-   set _ = out.append({'name': h, 'url': 'http://' ~ hostvars[h].ansible_facts.default_ipv4.address ~ ':8790/target'}) -%}
      {%- endfor -%}
      {{- out -}}
    host: "{{ inventory_hostname }}"
    fanout: 2
"""

RETURN = r"""
commit:
  description: The commit listed (mode=list) or fetched (mode=fetch).
  returned: always
  type: str
files:
  description: mode=list. path -> {size, oid, lfs} of the selected files; hand it to every host unchanged.
  returned: mode=list
  type: dict
hidden_skipped:
  description:
    - mode=list. Selected paths with a component starting with a dot (for example C(.gitattributes)); peers never
      serve dot paths, so they are left out of the fan-out (the seed's M(ct200.deploy.hf_download) still has them).
  returned: mode=list
  type: list
  elements: str
bytes_by_source:
  description: mode=fetch. Bytes received per source name (peer host names, C(hub)).
  returned: mode=fetch
  type: dict
files_by_source:
  description: mode=fetch. Files completed per source name.
  returned: mode=fetch
  type: dict
bytes_by_kind:
  description:
    - mode=fetch. Bytes received per kind of source, C(parent), C(peer), C(seed) and C(hub) (zeros included);
      C(ct200 deploy) shows them per host.
  returned: mode=fetch
  type: dict
files_by_kind:
  description: mode=fetch. Files completed per kind of source (as RV(bytes_by_kind)).
  returned: mode=fetch
  type: dict
repo_id:
  description: mode=fetch. The repository fetched.
  returned: mode=fetch
  type: str
rejected:
  description: mode=fetch. Files whose bytes from a source failed verification (path, source).
  returned: mode=fetch
  type: list
  elements: dict
fallbacks:
  description: mode=fetch. Files that came from another source than the first choice, and why.
  returned: mode=fetch
  type: list
  elements: dict
file_times:
  description:
    - mode=fetch. Per fetched file, the source it came from (C(source)), and when (Unix time, seconds) its first
      byte arrived (C(first_byte)) and it was verified and renamed into place (C(verified)). With the time the
      source renamed the file, this gives the lag of each hop of the fan-out (benchmarks/fanout).
  returned: mode=fetch
  type: dict
would_fetch:
  description: Check mode. Files that would be fetched.
  returned: check mode
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ct200.deploy.plugins.module_utils import fanout
from ansible_collections.ct200.deploy.plugins.module_utils._io import UnsafePathError
from ansible_collections.ct200.deploy.plugins.module_utils.hf_paths import url_credentials
from ansible_collections.ct200.deploy.plugins.module_utils.hf_download_spec import Options, shared_spec
from ansible_collections.ct200.deploy.plugins.module_utils.hf_errors import DownloadError
from ansible_collections.ct200.deploy.plugins.module_utils.redact import scrub

# the options shared with hf_download come from its spec (one default each); the rest are the fan-out's own
ARGUMENT_SPEC = dict(
    shared_spec(),
    mode=dict(type="str", choices=["list", "fetch"], default="fetch"),
    commit=dict(type="str"),
    files=dict(type="dict"),
    peers=dict(type="list", elements="dict"),
    host=dict(type="str"),
    seed=dict(type="str"),
    fanout=dict(type="int", default=1),
    seed_fanout=dict(type="int", default=1),
    use_hub=dict(type="bool", default=False),
    peer_wait_timeout=dict(type="float", default=3600.0),
    peer_stall_timeout=dict(type="float", default=60.0),
    poll_interval=dict(type="float", default=0.2),
    parallel_files=dict(type="int", default=4),
)


def _list(module):
    p = module.params
    commit, files, hidden = fanout.hub_listing(
        p["repo_id"], p["revision"], p["local_dir"], token=p["token"], endpoint=p["endpoint"],
        repo_type=p["repo_type"], allow_patterns=p["allow_patterns"], ignore_patterns=p["ignore_patterns"])
    return {"changed": False, "commit": commit, "files": files, "hidden_skipped": hidden,
            "bytes_total": sum(f["size"] for f in files.values())}


def _fetcher(module):
    p = module.params
    missing = [name for name in ("commit", "files", "peers", "host") if not p[name]]
    if missing:
        raise fanout.FanoutError("mode=fetch needs %s" % ", ".join(missing),
                                 fix="pass the seed's listing (commit, files), the site's peers and this host's name")
    sources = fanout.peer_sources(p["peers"], p["host"], p["seed"], p["fanout"], p["seed_fanout"])
    if p["use_hub"]:
        opts = Options(repo_id=p["repo_id"], local_dir=p["local_dir"], repo_type=p["repo_type"], endpoint=p["endpoint"])
        opts.validate()
        sources.append(fanout.hub_source(opts.endpoint, p["token"]))
    if not sources:
        raise fanout.FanoutError("%s is the seed and use_hub is false: it has no source" % p["host"],
                                 fix="run ct200.deploy.hf_download on the seed (it talks to the Hub)")
    return fanout.Fetcher(p["local_dir"], p["repo_id"], p["commit"], p["files"], sources, repo_type=p["repo_type"],
                          peer_wait=p["peer_wait_timeout"], peer_stall=p["peer_stall_timeout"], poll=p["poll_interval"],
                          stall_timeout=p["stall_timeout"], max_workers=p["max_workers"],
                          parallel_files=p["parallel_files"], lock_timeout=p["lock_timeout"],
                          min_free_bytes=p["min_free_bytes"], layout=p["layout"], reuse_dirs=p["reuse_dirs"],
                          after=fanout.earlier_sibling(p["peers"], p["host"], p["seed"], p["fanout"], p["seed_fanout"]),
                          final=fanout.final_route(p["peers"], p["host"], p["seed"]))


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    # credentials in an endpoint or peer URL are secrets: masked in every output, invocation included (a peer
    # URL with credentials is refused, but its refusal must not echo them either)
    peer_urls = [peer.get("url") for peer in module.params["peers"] or [] if isinstance(peer, dict)]
    secrets = [module.params["token"]] if module.params["token"] else []
    for url in [module.params["endpoint"], os.environ.get("HF_ENDPOINT")] + peer_urls:
        secrets += url_credentials(url)
    module.no_log_values.update(secrets)
    try:
        if module.params["mode"] == "list":
            result = _list(module)
        else:
            fetcher = _fetcher(module)
            result = fetcher.preview() if module.check_mode else fetcher.run()
    except DownloadError as exc:  # the fan-out's own (FanoutError) and hf_download's checks, lock and disk verdicts
        module.fail_json(**scrub(exc.as_result(), secrets))
    except UnsafePathError as exc:
        module.fail_json(msg=scrub(str(exc), secrets), code="unsafe_path")
    module.exit_json(**scrub(result, secrets))


if __name__ == "__main__":
    main()
