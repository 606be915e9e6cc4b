# SPDX-License-Identifier: Apache-2.0
"""Sandbox hosts only (test infrastructure, imported by the rootfs's sitecustomize): a cache of the code
that ``zipimport`` compiles.

Every Ansible task runs its module as an AnsiballZ zip, and zipimport compiles each ``.py`` it imports
from a zip anew (a zip holds no ``__pycache__``): ansible-core's own ``module_utils`` and ours, again for
every task (tests/integration/test_hub_calls.py, a deploy and two no-op deploys of 3 hosts: 125-142 CPU
seconds without this cache, 106-118 with it). Here the code
object of a source is kept, marshalled, under ``/var/cache/ct200-zipimport/EUID/``, keyed by the source's
sha256, the interpreter's cache tag and its optimisation level, and given back under the path of the zip
it was imported from this time. What runs is the same code compiled from the same bytes; only the
compile is skipped. Any failure of the cache (unreadable, full disk, another user) compiles as before.
"""

import hashlib
import marshal
import os
import stat
import sys
import zipimport

CACHE_ROOT = "/var/cache/ct200-zipimport"
_compile = zipimport._compile_source  # pylint: disable=protected-access
_CODE = type(_compile.__code__)


def _renamed(code, filename):
    """CODE and its nested functions and classes, reporting FILENAME (tracebacks name this task's zip)."""
    consts = tuple(_renamed(c, filename) if isinstance(c, _CODE) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _entry(source):
    key = hashlib.sha256(source).hexdigest()
    name = "%s-o%d-%s" % (sys.implementation.cache_tag, sys.flags.optimize, key)
    return os.path.join(CACHE_ROOT, str(os.geteuid()), name)


def _own_directory(path):
    """PATH exists, is this user's and no one else may write it (the cache root is shared, sticky)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    info = os.lstat(path)
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022


def _load(path, pathname):
    try:
        if not _own_directory(os.path.dirname(path)):
            return None
        with open(path, "rb") as handle:
            code = marshal.load(handle)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return _renamed(code, pathname) if isinstance(code, _CODE) else None


def _store(path, code):
    tmp = "%s.%d.%x.tmp" % (path, os.getpid(), id(code))  # one per writer, threads of one process included
    try:
        if not _own_directory(os.path.dirname(path)):
            return
        with open(tmp, "wb") as handle:
            marshal.dump(code, handle)
        os.replace(tmp, path)  # whole or not at all: a reader never sees half an entry
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def compile_source(pathname, source):
    path = _entry(source)
    code = _load(path, pathname)
    if code is None:
        code = _compile(pathname, source)
        _store(path, code)
    return code


zipimport._compile_source = compile_source  # pylint: disable=protected-access
