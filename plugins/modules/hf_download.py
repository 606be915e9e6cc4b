#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hf_download
short_description: Download a Hugging Face repository into a directory, verified, resumable and only once
version_added: "0.1.0"
description:
  - Downloads the files of O(repo_id) at O(revision) (resolved once to a commit, which is returned)
    into O(local_dir), for example C(/models/moonshotai/Kimi-K2.6).
  - B(Disk preflight before any byte moves.) The bytes still needed (tree sizes of the selected files
    minus files already complete and verified, minus resumable partial files) are compared with the free
    space of the filesystem that will hold them, plus O(min_free_bytes). A shortfall fails with the numbers
    and the filesystem, for example "need 595.3 GB more on /models (xfs, 593.0 GB free, headroom 10 GB)".
    An unknown size is an error, never 0.
  - B(Integrity.) Every file is hashed while it is written and compared with the Hub's oid (the LFS
    sha256, or the git blob sha1 of small files). A mismatch or short file is deleted and fetched again.
  - B(Manifest.) C(<local_dir>/.ct200/manifest.json) records path, size, mtime, ctime, inode, sha256 and commit of every
    verified file, and the tree of the commit, so a re-run is one C(stat) per file. With a 40-hex commit
    O(revision) such a re-run makes no network request at all; with a branch or tag it makes one small
    request to resolve the commit. Neither imports C(huggingface_hub.hf_api).
  - B(Resume and faults.) Partial files live in C(<local_dir>/.ct200/tmp/) with their byte ranges; a killed
    run keeps every completed file and resumes partial ones by HTTP Range. 408, 5xx and network errors are
    retried with exponential backoff; a transfer whose bytes stop growing for O(stall_timeout) seconds is
    aborted and retried. A 429 waits as long as the Hub's C(RateLimit) header (or C(Retry-After)) says,
    without using O(retries), up to 900 s per byte range in all. A signed CDN or Xet bridge URL that expired
    (403 from the redirect target) is resolved again, at once and then with backoff, up to 8 times in a row,
    and the file resumes by Range. Temp files no plan can use (ours, and orphaned huggingface_hub
    C(*.incomplete) files) are removed.
  - B(Speed.) huggingface_hub resolves the revision, lists the tree, checks access and builds the headers;
    the bytes of each file are moved by a lean HTTP/1.1 client (C(readinto) into a 1 MiB buffer, hash in the
    same pass), several files and several byte ranges of big files at once. The LFS redirect to the CDN is
    followed without the C(Authorization) header, like huggingface_hub does.
  - B(Progress.) While running, a JSON progress file (bytes done/total, rate, ETA, files) is rewritten every
    second, for a poller such as the C(ct200.deploy.model_weights) role, which runs this module with C(async).
    The C(ct200.deploy.weight_peer) role serves it to the site, so on failure it holds only the error code; the
    redacted message is in C(<local_dir>/.ct200/error.json) (mode 0600, never served).
  - B(Secrets.) Results, progress and error files go through one redaction (the token, C(Bearer ...), C(hf_...)
    strings, URL credentials, signed query strings), whatever an upstream echoed.
author: ct200-deploy developers (@ct200-deploy)
requirements:
  - huggingface_hub >= 2.4, < 2.5 on the managed host (not imported on a no-op re-run)
options:
  repo_id:
    description: Repository id, C(org/name).
    type: str
    required: true
  revision:
    description:
      - Branch, tag or 40-hex commit. It is resolved once to a commit; every file is fetched at that commit.
      - Pin a commit for reproducible deployments and network-free re-runs.
    type: str
    default: main
  repo_type:
    description: Repository type.
    type: str
    choices: [model, dataset, space]
    default: model
  local_dir:
    description:
      - Directory the repository's files are written to (created if missing). It holds one repository;
        its C(.ct200/) subdirectory holds the manifest, partial files, the lock and the progress file.
    type: path
    required: true
  allow_patterns:
    description:
      - Only files matching at least one of these fnmatch patterns (C(*) crosses C(/), a trailing C(/)
        means a whole directory), like huggingface_hub. Patterns that match nothing are reported as warnings.
    type: list
    elements: str
  ignore_patterns:
    description: Files matching any of these patterns are not downloaded.
    type: list
    elements: str
  token:
    description:
      - Hugging Face access token. Never logged or returned.
      - When unset, the token is resolved like huggingface_hub 2.4 for the user the module runs as
        (C(HF_TOKEN), then C(HF_TOKEN_PATH) / C($HF_HOME/token)); with none, requests are anonymous
        (enough for public repositories).
    type: str
  token_user:
    description:
      - Resolve the token from this OS user's token file instead of the user the module runs as.
    type: str
  endpoint:
    description:
      - Hub endpoint, an C(http://) or C(https://) URL. Defaults to C($HF_ENDPOINT), else U(https://huggingface.co).
      - A URL with credentials (C(user:password@)) is refused, and the credentials are masked in every output.
    type: str
  max_workers:
    description: Parallel connections (files, and byte ranges of big files).
    type: int
    default: 8
  min_free_bytes:
    description:
      - Headroom that must remain free on the filesystem after the download. Bytes, or a string such as
        C(10GB) (decimal) or C(10GiB) (binary).
    type: raw
    default: 10GB
  verify:
    description:
      - C(sha256) (default) hashes every downloaded file, and re-hashes in full every present file the manifest
        does not vouch for with the same size, mtime, ctime and inode (like git and rsync, which re-read a
        file whose stat changed). Present files are hashed in parallel, one thread per core.
      - C(full) re-hashes every selected file on every run (like C(hf cache verify)); slow for large repositories.
      - C(size) trusts sizes and skips hashing of large (LFS) files.
      - C(sample-unsafe) is C(sha256), except that a file whose stat changed but whose size did not is
        re-accepted when 16 sampled 64 KiB blocks are unchanged. Bytes outside those blocks are not read, so a
        corrupted or tampered file can be accepted; only for operators who accept that risk.
    type: str
    choices: [size, sha256, full, sample-unsafe]
    default: sha256
  stall_timeout:
    description: Seconds without a single new byte after which a transfer is aborted and retried.
    type: float
    default: 60
  retries:
    description:
      - Retries of a byte range that makes no progress (408, 429, 5xx, network errors, stalls), and
        re-downloads of a file whose hash does not match. Waits 1, 2, 4, ... 30 s, or C(Retry-After).
    type: int
    default: 5
  min_split_size:
    description:
      - Files are fetched in order (the files stored in git first, then the LFS files, each in path order),
        each as up to O(max_workers) parallel byte ranges of at least this size, queued file after file, so
        files complete one after another (the site fan-out's children can take each as soon as it is
        verified). Near the end an idle connection also takes over half of a range
        that has at least twice this much left (like aria2's C(--min-split-size)). Bytes or C(64MiB); at least
        64 KiB.
    type: raw
    default: 64MiB
  progress_file:
    description: Where the progress JSON is written. Defaults to C(<local_dir>/.ct200/progress.json).
    type: path
  direct_io:
    description:
      - Write files of 16 MiB and more with C(O_DIRECT) (whole aligned pages; the unaligned rest through the
        page cache). The bytes are not copied into the page cache, which saves about a third of the CPU per
        byte and keeps a 600 GB download from evicting everything else from memory. Falls back to ordinary
        writes where the filesystem refuses it.
    type: bool
    default: true
  fsync:
    description:
      - Flush each completed file to disk (C(fsync)) before it is renamed into place and recorded as verified.
      - Off by default; the download then runs at page-cache speed, like C(curl) or C(hf download). After a
        crash, data that had not reached the disk shows up as a missing or short file, which the next run's
        C(stat) check fetches again (ext4 C(data=ordered) and XFS commit a file's size only after its data),
        and a manifest entry lost in the crash only means that file is hashed again. Turn it on for
        filesystems without that guarantee; the manifest is then fsynced too.
    type: bool
    default: false
  lock_timeout:
    description:
      - Seconds to wait when another hf_download holds the lock on O(local_dir). The lock is taken before the
        manifest is read or anything is planned, so a waiting run plans from what the other run left.
      - C(0) fails at once with code C(busy).
    type: float
    default: 0
  listing:
    description:
      - The tree of the commit O(revision) as the controller fetched it once for the whole fleet
        (M(ct200.deploy.hf_repo_meta) with O(ct200.deploy.hf_repo_meta#module:list_tree=true)), each entry
        C({path, size, oid, lfs}). The module then asks the Hub for no listing and no access check (the
        controller proved access); files are still fetched and verified against these sizes and oids.
      - Every path and entry is checked like the Hub's own listing (see the notes); O(revision) must be a 40-hex commit.
      - Unused when the manifest already vouches for every selected file at that commit.
    type: list
    elements: dict
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ct200.deploy.hf_layout
attributes:
  check_mode:
    support: full
    details: Resolves the revision, lists the tree, checks access and the disk, and reports the files and
      bytes it would fetch; writes nothing.
  diff_mode:
    support: full
    details: Lists the files that would be fetched, with the reason and the expected size and hash.
  platform:
    support: full
    platforms: posix
notes:
  - Only one download may write to a O(local_dir) at a time (a lock file, taken before planning, enforces it).
  - Every path in the Hub's tree listing is checked before any byte is written, with huggingface_hub's rule and
    stricter (no absolute path, no C(..), C(.) or empty segment, no backslash, no control character, nothing
    under C(.ct200/) or C(.cache/huggingface/)); a listing with such a path is refused as a broken or hostile Hub.
  - No symlink under O(local_dir) is followed; a symlink where a file belongs is replaced, one on the way to a
    file is refused.
  - Files are written as the user the module runs as, with mode 0644 (minus umask).
  - Xet-backed repositories are downloaded over the Hub's plain HTTP resolve/CDN path (cas-bridge), and verified
    with the C(lfs.oid) sha256 the listing carries beside C(xetHash). A file listed with a C(xetHash) and no
    C(lfs) cannot be verified here and is refused before any byte (C(xet_unverifiable)).
  - A proxy from C(https_proxy)/C(http_proxy) (and C(no_proxy)) is used for the bytes like huggingface_hub uses
    it for the metadata; C(USER:PASSWORD@) in the proxy URL is sent as C(Proxy-Authorization) Basic (on the
    CONNECT for https, on each request for http) and never printed.
seealso:
  - module: ct200.deploy.hf_gated_access
  - module: ct200.deploy.disk_space
"""

EXAMPLES = r"""
- name: Download the target weights, pinned to a commit
  ct200.deploy.hf_download:
    repo_id: moonshotai/Kimi-K2.6
    revision: 0123456789abcdef0123456789abcdef01234567
    local_dir: /models/moonshotai/Kimi-K2.6
    min_free_bytes: 10GB

- name: Only the safetensors shards and the configs of a gated drafter
  ct200.deploy.hf_download:
    repo_id: z-lab/Kimi-K2.6-DFlash
    local_dir: /models/z-lab/Kimi-K2.6-DFlash
    allow_patterns: ["*.safetensors", "*.json"]
    token: "{{ vault_hf_token }}"

- name: What would be fetched, and how many bytes
  ct200.deploy.hf_download:
    repo_id: moonshotai/Kimi-K2.6
    local_dir: /models/moonshotai/Kimi-K2.6
  check_mode: true
  register: plan
"""

RETURN = r"""
commit:
  description: The commit the revision resolved to; every file was fetched and verified at it.
  returned: always
  type: str
  sample: 0123456789abcdef0123456789abcdef01234567
revision:
  description: The requested revision.
  returned: always
  type: str
local_dir:
  description: Absolute path of the download directory (with O(layout=snapshots), the commit's snapshot directory).
  returned: always
  type: str
root_dir:
  description: The repository's root when RV(local_dir) is a snapshot (C(<root>/snapshots/<commit>)), else null.
  returned: always
  type: str
files_linked:
  description: Files hard-linked from kept snapshots (unchanged oid) instead of downloaded.
  returned: when files were downloaded or linked
  type: int
bytes_linked:
  description: Bytes of RV(files_linked); none of them came from the Hub or took new disk space.
  returned: when files were downloaded or linked
  type: int
would_link:
  description: In check mode, the files that would be hard-linked from a kept snapshot (C(source) names it).
  returned: check mode
  type: list
  elements: dict
files:
  description: Number of files selected by the patterns at that commit.
  returned: always
  type: int
bytes_total:
  description: Total size of the selected files.
  returned: always
  type: int
bytes_downloaded:
  description: Bytes received from the network by this run.
  returned: always
  type: int
bytes_resumed:
  description: Bytes of partial files that this run resumed instead of fetching again.
  returned: always
  type: int
bytes_skipped:
  description: Bytes of selected files already present and verified.
  returned: always
  type: int
files_downloaded:
  description: Number of files fetched by this run.
  returned: always
  type: int
files_skipped:
  description: Number of files already present and verified.
  returned: always
  type: int
files_hashed:
  description: Present files that had to be hashed (no manifest entry, changed size/mtime/ctime/inode, or verify=full).
  returned: always
  type: int
files_refreshed:
  description: Present files whose stat changed and that were re-accepted without a full hash (only with
    O(verify=size) or O(verify=sample-unsafe)).
  returned: always
  type: int
files_adopted:
  description: Present files not in the manifest that matched the Hub and were kept.
  returned: always
  type: int
downloaded:
  description: Paths fetched by this run (first 200).
  returned: when files were downloaded
  type: list
  elements: str
refetched:
  description: Paths fetched again because their hash or size did not match.
  returned: when files were downloaded
  type: list
  elements: str
retries:
  description: Number of retried byte ranges (5xx, 429, network errors, stalls).
  returned: when files were downloaded
  type: int
retry_causes:
  description: Retries by cause (for example C(http_503), C(http_429), C(stall), C(cut), C(expired_url)).
  returned: when files were downloaded
  type: dict
rate_limit_wait_s:
  description: Seconds the byte ranges waited, summed over them, because the Hub answered 429 with C(RateLimit) or
    C(Retry-After) (not counted in O(retries)).
  returned: when files were downloaded
  type: float
reresolves:
  description: Signed CDN or Xet bridge URLs found expired and resolved again (C(retry_causes.expired_url)).
  returned: when files were downloaded
  type: int
stalls:
  description: Transfers aborted because no byte arrived for O(stall_timeout) seconds.
  returned: when files were downloaded
  type: int
seconds:
  description: Wall time of the module run.
  returned: always
  type: float
mean_rate:
  description: Bytes per second received while fetching.
  returned: always
  type: float
timings:
  description:
    - Seconds spent in each phase (C(manifest_check), C(import_huggingface_hub), C(plan) = revision, tree,
      local checks, disk preflight and access check, C(prepare), C(fetch), C(finish)).
  returned: when files were downloaded
  type: dict
planning:
  description:
    - C(manifest) when the run was answered from the manifest (and at most one small revision request);
      C(hub) when the Hub was asked through huggingface_hub.
  returned: always
  type: str
network_calls:
  description: Hub API requests made for planning (not counting file transfers).
  returned: always
  type: int
bytes_to_download:
  description: In check mode, the bytes that would be fetched.
  returned: check mode
  type: int
files_to_download:
  description: In check mode, the number of files that would be fetched.
  returned: check mode
  type: int
would_download:
  description: In check mode, the files that would be fetched, with size, reason and resume offset.
  returned: check mode
  type: list
  elements: dict
disk:
  description: The disk preflight for this download (mount point, fs type, free, needed, headroom).
  returned: when the Hub was asked
  type: dict
removed_temp_files:
  description: Stale temp files removed before fetching (relative to O(local_dir)).
  returned: when files were downloaded
  type: list
  elements: str
token_source:
  description: Where the token came from (C(explicit), C(env:HF_TOKEN), C(file:/path)) or null; never the token.
  returned: always
  type: str
progress_file:
  description: Path of the progress JSON.
  returned: always
  type: str
code:
  description:
    - On failure, the cause, for example C(disk_full) (before or during the download), C(no_token),
      C(not_requested), C(transfer_failed), C(busy) (another run holds the lock), C(bad_argument),
      C(unsafe_path) (a listed path or a symlink under O(local_dir) that is refused), C(bad_listing)
      (a tree entry without a usable size or oid), C(xet_unverifiable) (a selected file listed with a
      C(xetHash) and no C(lfs) sha256) or C(proxy_auth) (the proxy answered 407).
  returned: failure
  type: str
fix:
  description: On failure, what to do about it.
  returned: failure
  type: str
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import TokenError, resolve_token  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils.hf_download_spec import ARGUMENT_SPEC  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils.hf_paths import url_credentials  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils.redact import scrub  # noqa: E402


def build_options(module):
    p = module.params
    try:
        resolved = resolve_token(p["token"], p["token_user"])
    except TokenError as exc:
        raise hf_transfer.DownloadError(str(exc), code="bad_token", fix="nothing was downloaded")
    params = dict((name, p[name]) for name in ARGUMENT_SPEC if name not in ("token", "token_user"))
    return hf_transfer.Options(
        token=resolved.token,
        token_source=resolved.source,
        check_mode=module.check_mode,
        diff=module._diff,
        **params
    )


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    # credentials in an endpoint URL are secrets: masked in every output, invocation included
    proxies = [os.environ.get(name) for name in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")]
    for url in [module.params["endpoint"], os.environ.get("HF_ENDPOINT")] + proxies:
        for secret in url_credentials(url):
            module.no_log_values.add(secret)  # a proxy's password too: masked wherever it might be echoed
    secrets = []
    try:
        opts = build_options(module)
        secrets = hf_transfer.secrets_of(opts)
        module.no_log_values.update(secrets)  # a token read from a file is masked like the token option
        result = hf_transfer.run(opts)
    except hf_transfer.DownloadError as exc:
        module.fail_json(**scrub(exc.as_result(), secrets))
    result = scrub(result, secrets)  # the one redaction: nothing an upstream echoed leaves the host
    warnings = result.pop("warnings", None) or []
    for warning in warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
