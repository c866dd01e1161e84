"""Run code once another library is imported, without importing it: ``after_import``.

LeanPass uses it for einops (leanpass/_einops.py): einops looks for the backend of a
tensor among the backend classes that exist when it meets the tensor, so LeanPass's
must be defined once einops is imported, whichever of the two came first, and
``import leanpass`` must neither import einops nor get slower.

When the library is already imported the callback runs at once. Otherwise a finder
at the front of ``sys.meta_path`` waits for that one name: it asks the other finders
for the module's spec, as the import system would, and wraps the loader so the
callback runs right after the module's code; then the finder removes itself. It
looks at no other import, and the module ends up with its own loader and spec.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Callable


def after_import(name: str, callback: Callable[[], object]) -> None:
    """Call ``callback()`` once the module ``name`` is imported: now if it is already.

    An exception from the callback becomes a ``RuntimeWarning``: the import of the
    other library (or of LeanPass) goes on."""
    if name in sys.modules:
        _call(name, callback)
    else:
        sys.meta_path.insert(0, _Finder(name, callback))


def _call(name, callback):
    try:
        callback()
    except Exception as exc:  # noqa: BLE001 - another library's import must not fail because of LeanPass
        warnings.warn(f"leanpass: could not hook into {name} ({type(exc).__name__}: {exc})", RuntimeWarning,
                      stacklevel=3)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, name, callback):
        self.name, self.callback, self._searching = name, callback, False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self._searching:
            return None
        self._searching = True  # the search below runs through sys.meta_path, this finder included
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._searching = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # not installed (the import fails as usual), or a loader this cannot wrap
        spec.loader = _ThenCall(spec.loader, self)
        return spec

    def loaded(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        _call(self.name, self.callback)


class _ThenCall(importlib.abc.Loader):
    """The module's own loader, then the finder's callback."""

    def __init__(self, loader, finder):
        self.loader, self.finder = loader, finder

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader  # the module names its real loader
        self.loader.exec_module(module)
        self.finder.loaded()
