# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""O(layout) and O(reuse_dirs), documented once for ct200.deploy.hf_download and ct200.deploy.hf_fanout_fetch.

Both modules take these options from hf_download_spec (one type and one default); this fragment is their
one description.
"""

from __future__ import annotations


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  layout:
    description:
      - C(flat) writes the files into O(local_dir) itself.
      - C(snapshots) takes O(local_dir) as the repository's root and writes the commit being fetched (a branch or tag
        is resolved to its commit first) into C(<local_dir>/snapshots/<commit>/).
        Each commit gets its own directory beside the kept ones, so a new commit is staged while the old one serves.
      - Whatever the layout, a O(local_dir) named C(.../snapshots/<commit40>) is a snapshot, once complete never
        written with another commit's files (C(snapshot_mismatch)); its verified files are made read-only (0444),
        and every file whose oid is unchanged versus a sibling snapshot is hard-linked from it instead of downloaded.
    type: str
    choices: [flat, snapshots]
    default: flat
  reuse_dirs:
    description:
      - More kept directories of the same repository (besides the sibling snapshots, found automatically) whose
        verified files are hard-linked instead of downloaded when their oid is unchanged.
      - A file is reused only if that directory's own manifest vouches for it as hashed against the oid after its last
        change and its stat (inode, size, mtime, ctime) is still the recorded one, checked again right before the link
        under that directory's lock. A symlink is never followed; a busy or changed source is fetched from instead.
    type: list
    elements: path
"""
