"""Start-up of a chorus interpreter: the import hook for C extensions.

Each interpreter must run its own copy of every C extension module, bound to
its own copy of libpython (see docs/interpreter.md). `install()` puts a finder
first on sys.meta_path that resolves modules exactly as the standard path
finder does, then, for C extensions only, loads this interpreter's private copy
(prepared and scoped by the host) while the module keeps its real __file__.
"""

import importlib.machinery
import os
import sys

import _chorus

_PathFinder = importlib.machinery.PathFinder
_ExtensionFileLoader = importlib.machinery.ExtensionFileLoader


class _PrivateCopyLoader(_ExtensionFileLoader):
    """Loads this interpreter's copy of a C extension instead of the shared file."""

    def create_module(self, spec):
        import _imp

        copy = _chorus.prepare_extension(self.path)
        private_spec = importlib.machinery.ModuleSpec(spec.name, self, origin=copy)
        # RTLD_GLOBAL would publish this interpreter's copies to every later
        # interpreter's symbol lookups; extensions are always loaded local.
        flags = sys.getdlopenflags()
        sys.setdlopenflags(os.RTLD_NOW)
        # torch._C makes its own autograd engine libtorch's process-wide
        # default as it initializes; the host keeps each interpreter's and
        # routes the default (one interpreter's torch._C at a time).
        initializes_torch = spec.name == "torch._C"
        if initializes_torch:
            _chorus.begin_torch_initialization()
        try:
            module = _imp.create_dynamic(private_spec)
        finally:
            sys.setdlopenflags(flags)
            if initializes_torch:
                _chorus.end_torch_initialization()
        # Single-phase modules record the file they were loaded from; report
        # the real one, as the stock loader does.
        module.__file__ = self.path
        return module


class PrivateExtensionFinder:
    """sys.meta_path finder: the standard path finder, with private extension copies."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        spec = _PathFinder.find_spec(name, path, target)
        if spec is not None and type(spec.loader) is _ExtensionFileLoader:
            spec.loader = _PrivateCopyLoader(spec.loader.name, spec.loader.path)
        return spec

    @classmethod
    def invalidate_caches(cls):
        _PathFinder.invalidate_caches()


def install():
    """Installs the finder in place of the path finder, then the torch shims and site."""
    meta_path = sys.meta_path
    index = meta_path.index(_PathFinder) if _PathFinder in meta_path else len(meta_path)
    meta_path[index:index + 1] = [PrivateExtensionFinder]

    from chorus import _torch_compat
    _torch_compat.install_import_hook()

    import site
    site.main()
