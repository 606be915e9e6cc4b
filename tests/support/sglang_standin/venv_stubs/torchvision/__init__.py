# SPDX-License-Identifier: Apache-2.0
"""ct200 import stub -- NOT torchvision.

Copied into the CPU-only SGLang parse venv by scripts/sglang-parse-venv.sh so
SGLang's argument parser and resolver import on CPU torch (PyPI torchvision
fails there: "torchvision::nms does not exist"). Any attribute of torchvision
or of a torchvision.* submodule is a placeholder class; calling an instance of
one raises, so nothing can silently process an image with it.
"""
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+ct200stub"


class _StubMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _make(f"{cls.__qualname__}.{name}")


class _Stub(metaclass=_StubMeta):
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        raise RuntimeError("torchvision is a ct200 import stub in this venv")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _make(name)


def _make(name):
    return _StubMeta(name.rsplit(".", 1)[-1], (_Stub,), {"__qualname__": name})


def _module_getattr(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _make(name)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = _module_getattr
        return mod

    def exec_module(self, module):
        pass


sys.meta_path.append(_Finder())
__getattr__ = _module_getattr
