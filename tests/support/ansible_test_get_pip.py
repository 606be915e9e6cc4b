# SPDX-License-Identifier: Apache-2.0
"""Stand-in for ansible-test's pip bootstrap script.

ansible-test downloads get-pip from ci-files.testing.ansible.com, which is not
reachable from our CI (only PyPI is). It looks for a cached copy at
~/.ansible/test/cache/get_pip_<version>.py first; tests put this file there under
a private HOME. It takes get-pip's arguments: pip install options and packages.
"""

import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "pip", "install", *args])
