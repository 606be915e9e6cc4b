#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hf_download_wait
short_description: Wait for async hf_download jobs and print their progress at a steady interval
version_added: "0.1.0"
description:
  - "Action plugin (runs on the controller) for M(ct200.deploy.hf_download) started with C(async) and C(poll=0).
    Every O(interval) seconds it checks each job with C(ansible.builtin.async_status), reads the job's progress
    JSON with C(ansible.builtin.slurp) and prints one line per job, for example
    'target moonshotai/Kimi-K2.6: 123.45/595.30 GB (20.7 %), 1100 MB/s, ETA 1h52m, files 12/64'."
  - Returns when every job has finished. It does not fail when a job failed; the final results are returned in
    RV(jobs) for the caller to report (the C(ct200.deploy.model_weights) role does).
  - Polling in plain YAML needs a recursive C(include_tasks) per round, which ansible-core 2.19 runs as Python
    recursion and aborts after about 200 rounds; this action loops instead.
author: ct200-deploy developers (@ct200-deploy)
options:
  jobs:
    description: The jobs to wait for.
    type: list
    elements: dict
    required: true
    suboptions:
      jid:
        description: C(ansible_job_id) of the async task.
        type: str
        required: true
      label:
        description: Name printed in front of the job's progress line.
        type: str
      progress_file:
        description: The progress JSON the download writes (C(<local_dir>/.ct200/progress.json) by default).
        type: path
  interval:
    description: Seconds between progress lines.
    type: float
    default: 30
  timeout:
    description: Give up waiting after this many seconds (the downloads keep running; a re-run resumes them).
    type: float
    default: 172800
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  check_mode:
    support: none
    details: Only meaningful after real async downloads were started.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
  bypass_host_loop:
    support: none
notes:
  - Run it with the same C(become_user) as the async task, whose job files live in that user's C(~/.ansible_async).
"""

EXAMPLES = r"""
- name: Start the download in the background
  ct200.deploy.hf_download:
    repo_id: moonshotai/Kimi-K2.6
    local_dir: /models/moonshotai/Kimi-K2.6
  async: 172800
  poll: 0
  register: job

- name: Print progress every 30 s until it is done
  ct200.deploy.hf_download_wait:
    jobs:
      - jid: "{{ job.ansible_job_id }}"
        label: target
        progress_file: /models/moonshotai/Kimi-K2.6/.ct200/progress.json
    interval: 30
  register: waited
"""

RETURN = r"""
jobs:
  description: The final C(async_status) result of each job, in the order of O(jobs) (the hf_download result,
    or the failure).
  returned: always
  type: list
  elements: dict
rounds:
  description: Number of polling rounds.
  returned: always
  type: int
"""

from ansible_collections.ct200.deploy.plugins.module_utils.action_stub import fail_on_host  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils.hf_progress import WAIT_ARGUMENT_SPEC  # noqa: E402


def main():
    fail_on_host("hf_download_wait", WAIT_ARGUMENT_SPEC)


if __name__ == "__main__":
    main()
