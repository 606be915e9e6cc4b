# SPDX-License-Identifier: Apache-2.0
"""ct200-router launcher (installed by ct200.deploy.router): sglang-router with its flags from a JSON file.

The flags are in CONFIG["argv"] (no secret). The API key, when there is one, comes from the systemd credential
``api_key`` ($CREDENTIALS_DIRECTORY, LoadCredential=) and is handed to sglang-router's own parser in
process: it is never in this process's argv (ps, /proc/PID/cmdline), the unit or an environment file.
"""
import json
import os
import sys

from sglang_router.launch_router import launch_router, parse_router_args


def main():
    with open(sys.argv[1], encoding="utf-8") as handle:
        argv = list(json.load(handle)["argv"])
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    path = os.path.join(creds, "api_key") if creds else None
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            key = handle.read(4096).strip()
        if key:
            argv += ["--api-key", key]
    launch_router(parse_router_args(argv))


if __name__ == "__main__":
    main()
