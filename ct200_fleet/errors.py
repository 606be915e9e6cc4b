# SPDX-License-Identifier: Apache-2.0
"""The one error type the command reports as a single line (cause and fix) and exit code 2."""


class CliError(Exception):
    """Bad input or a refusal: nothing was run."""
