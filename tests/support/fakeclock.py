# SPDX-License-Identifier: Apache-2.0
"""A monotonic clock that moves only when the code under test sleeps: waits and timeouts tested in no time."""


class FakeClock(object):
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
