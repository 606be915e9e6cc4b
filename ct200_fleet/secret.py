# SPDX-License-Identifier: Apache-2.0
"""Where the token may come from and how it reaches a playbook.

ansible-runner copies the whole environment of its caller into
``artifacts/<id>/command`` and puts every extra var on the ansible-playbook
command line, so the token travels neither way: it is read from a file or
standard input, written to a 0600 file in a private directory *outside* the
runner's private data dir, and only that file's path is handed to the playbook.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
import tempfile

from ansible_collections.ct200.deploy.plugins.module_utils._io import (
    UnsafePathError, atomic_write, open_nofollow, safe_remove)

from ct200_fleet.errors import CliError

# Variables huggingface_hub reads a token from; any of them would be recorded by runner.
TOKEN_ENV_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN")
MAX_TOKEN_BYTES = 4096


def refuse_token_in_environment(environ) -> None:
    """Refuse to start runner while a token sits in the environment it would record."""
    present = [name for name in TOKEN_ENV_VARS if environ.get(name)]
    if present:
        raise CliError(
            "%s is set in the environment: ansible-runner records the whole environment in "
            "artifacts/<id>/command, so ct200 will not run with a token there. Unset it "
            "(unset %s) and give a new token with --token-file FILE or --token-stdin; the "
            "current token comes from the inventory (vault)." % (", ".join(present), " ".join(present)))


def refuse_token_in_any_variable(token: str, environ) -> None:
    """The same protection for a token exported under any other name."""
    names = sorted(name for name, value in environ.items() if token in value)
    if names:
        raise CliError("the token is in the environment variable(s) %s, which ansible-runner would record "
                       "in artifacts/<id>/command: unset them and run again" % ", ".join(names))


def validated_token(raw: bytes, source: str) -> str:
    """One line of printable ASCII without inner whitespace; a final newline is allowed."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise CliError("%s is not ASCII: a Hugging Face token is one line of ASCII; write only the token "
                       "(hf_...) into it" % source) from None
    token = text[:-1] if text.endswith("\n") else text
    token = token[:-1] if token.endswith("\r") else token
    if not token.strip():
        raise CliError("%s is empty: put the new token (hf_...) in it, one line" % source)
    if token != token.strip() or any(c.isspace() or not c.isprintable() for c in token):
        raise CliError("%s holds more than one token-like line or whitespace/control characters: "
                       "write only the token, on one line" % source)
    return token


def read_token_file(path: str) -> str:
    """Read the operator's token file without following a symlink in its last component."""
    source = "--token-file %s" % path
    try:
        fd = open_nofollow(os.path.abspath(path), os.O_RDONLY)
    except FileNotFoundError:
        raise CliError("%s does not exist: give the path of a file holding the new token" % source) from None
    except UnsafePathError as exc:
        raise CliError("%s: %s" % (source, exc)) from None
    except OSError as exc:
        raise CliError("%s cannot be read (%s): check its permissions" % (source, exc.strerror)) from None
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode & 0o777
        raw = handle.read(MAX_TOKEN_BYTES + 1)
    if len(raw) > MAX_TOKEN_BYTES:
        raise CliError("%s is larger than %d bytes: it should hold only the token" % (source, MAX_TOKEN_BYTES))
    token = validated_token(raw, source)
    if mode & 0o044:
        warn("%s is readable by %s (mode %04o): every user of this machine who can read it holds the token; "
             "chmod 600 %s (or pipe the token in with --token-stdin)"
             % (source, "every user" if mode & 0o004 else "its group", mode, shlex.quote(path)))
    return token


def warn(text: str, stream=None) -> None:
    print("ct200: warning: %s" % text, file=stream or sys.stderr)


def read_token_stdin(stream) -> str:
    raw = stream.read(MAX_TOKEN_BYTES + 1)
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    if len(raw) > MAX_TOKEN_BYTES:
        raise CliError("standard input is larger than %d bytes: pipe in only the token" % MAX_TOKEN_BYTES)
    return validated_token(raw, "standard input")


def _secret_base() -> str | None:
    """A RAM-backed directory when there is one, so the file never reaches a disk."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _inside(path: str, directory: str) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return os.path.commonpath([path, directory]) == directory


@contextlib.contextmanager
def token_file_outside(token: str, private_data_dir: str):
    """Yield the path of a 0600 file holding ``token``, outside ``private_data_dir``; removed on exit."""
    secret_dir = tempfile.mkdtemp(prefix="ct200-secret-", dir=_secret_base())
    try:
        if _inside(secret_dir, private_data_dir):
            raise CliError("the private data dir %s contains the temporary directory %s: give "
                           "--private-data-dir a dedicated directory so the token file stays outside it"
                           % (private_data_dir, secret_dir))
        path = os.path.join(secret_dir, "token")
        atomic_write(path, token + "\n", mode=0o600)
        try:
            yield path
        finally:
            safe_remove(path)
    finally:
        shutil.rmtree(secret_dir, ignore_errors=True)
