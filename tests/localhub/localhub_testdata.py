# SPDX-License-Identifier: Apache-2.0
"""Constants shared by the local Hub tests (importable from test modules)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SUPPORT_DIR = REPO_ROOT / "tests" / "support"  # the package `localhub` lives here
MANY_REPO = "test/many-files"
MANY_FILES = 1205
BIG_REPO = "test/faulty"
BIG_FILE = "big.safetensors"
BIG_SIZE = 24 * 1024 * 1024
DATASET_REPO = "test/dataset"

PRELUDE = '''
import hashlib, json, os, sys, time
from huggingface_hub import HfApi, hf_hub_download, snapshot_download, get_hf_file_metadata, hf_hub_url
from huggingface_hub import errors as hf_errors
from localhub.personas import token_for
api = HfApi()
RESULT = {}

def err(e):
    resp = getattr(e, "response", None)
    return {
        "cls": type(e).__name__,
        "mro": [c.__name__ for c in type(e).__mro__],
        "status": getattr(resp, "status_code", None),
        "code": resp.headers.get("X-Error-Code") if resp is not None else None,
        "server_message": getattr(e, "server_message", None),
        "msg": str(e),
    }

def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()

def attempt(fn, *args, **kwargs):
    try:
        value = fn(*args, **kwargs)
        return {"ok": True, "value": value if isinstance(value, (str, int, float, type(None), list, dict)) else repr(value)}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, **err(e)}
'''
