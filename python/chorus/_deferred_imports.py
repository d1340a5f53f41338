"""Deferred imports: the parts of torch a serving interpreter rarely touches
are imported the first time they are used, not at `import torch`.

Every interpreter pays for each module it imports (its code objects, classes
and functions are Python objects of that interpreter): `import torch` imports
about 1,200 modules, and torchvision imports torch._dynamo (and through it
sympy, torch._inductor and triton's Python code: another 850 modules) only to
ask whether compiling is supported. The modules in DEFERRED are instead
created empty when first imported, and executed on the first access to any of
their attributes (torch defers torch._dynamo and torch.onnx the same way, by
attribute, but its own imports then load the rest). Metadata the import system
reads (__spec__, __path__, __name__...) does not count as use, so importing a
submodule or importing the module again defers nothing further. Names listed
in DEFERRED_NAMES are handed out as forwarders that import their module when
called, for `from module import name` lines whose name is rarely called.

What model code sees is unchanged but for timing: `torch.distributions.Normal`
imports torch.distributions then, as `import torch.distributions` would have.
The modules deferred register nothing with the dispatcher as they import (a
requirement for being on the list: a registration must not wait for an
attribute access). InterpreterManagerOptions::defer_imports (chorus-server
--eager-imports) turns this off.
"""

import importlib.abc
import importlib.machinery
import sys
import threading
import types

# Modules whose import is deferred to their first use: torch subsystems for
# training, data loading, testing and profiling, torch's less common tensor
# kinds, torch._dynamo (torch.compile's front end) and numpy's random
# generators (with their C extensions, copied per interpreter; numpy 2 defers
# them itself, numpy 1.26 imports them with numpy); torchvision's
# datasets and its model families other than classification (which a
# classifier's unpickling would otherwise import: 170 modules). Each is on the
# list because `import torch` (2.11 to 2.14) and torchvision's imports leave
# it unused; subsystems torch's own import graph reaches (torch.fx,
# torch.export, torch.distributed) are not, nor torchvision.io (its import
# registers the image operators).
DEFERRED = frozenset({
    "numpy.random",
    "torch._dynamo",
    "torch.cuda.tunable",
    "torch.distributions",
    "torch.masked",
    "torch.nested",
    "torch.optim",
    "torch.profiler",
    "torch.quantization",
    "torch.sparse",
    "torch.testing",
    "torch.utils.data",
    "torchvision.datasets",
    "torchvision.models.detection",
    "torchvision.models.optical_flow",
    "torchvision.models.quantization",
    "torchvision.models.segmentation",
    "torchvision.models.video",
})

# module -> names handed out as forwarders. torchvision.ops.roi_align imports
# is_compile_supported from torch._dynamo.utils at import, and calls it only
# when roi_align runs (detection models).
DEFERRED_NAMES = {
    "torch._dynamo.utils": frozenset({"is_compile_supported"}),
}

# What the import system (and repr, pickling of module references) reads
# from a module without using it.
_METADATA = frozenset({
    "__name__", "__spec__", "__loader__", "__package__", "__path__", "__file__",
    "__cached__", "__class__", "__dict__", "__repr__",
})


class _Pending:
    """The real loader of a deferred module, and the lock its first use takes."""

    def __init__(self, loader):
        self.loader = loader
        self.lock = threading.RLock()
        self.executing = False


class DeferredModule(types.ModuleType):
    """A module not executed yet; the first attribute access executes it and
    makes it a plain module."""

    def __getattribute__(self, attr):
        if attr in _METADATA:
            return object.__getattribute__(self, attr)
        spec = object.__getattribute__(self, "__dict__")["__spec__"]
        forwarded = DEFERRED_NAMES.get(spec.name, ())
        if attr in forwarded and type(self) is DeferredModule:
            return _forwarder(self, attr)
        _execute(self)
        return object.__getattribute__(self, attr)

    def __dir__(self):
        self.__doc__  # any attribute: executes the module  # noqa: B018
        return dir(self)


def _execute(module, blocking=True):
    """Runs a deferred module's code (its real loader), then makes it a plain
    module. Attribute accesses of the same thread while it runs (circular
    imports) see the module as it is so far, as with any import; other threads
    wait for it (unless not `blocking`: then False when another thread runs
    it). A deferred package runs before its deferred submodule, as in a normal
    import."""
    spec = object.__getattribute__(module, "__spec__")
    parent_name = spec.name.rpartition(".")[0]  # (a package's spec.parent is itself)
    parent = sys.modules.get(parent_name) if parent_name else None
    if type(parent) is DeferredModule and not _execute(parent, blocking):
        return False
    pending = spec.loader_state
    if not pending.lock.acquire(blocking):
        return False
    try:
        if type(module) is DeferredModule and not pending.executing:
            pending.executing = True
            try:
                pending.loader.exec_module(module)
            finally:
                pending.executing = False
            object.__setattr__(module, "__class__", types.ModuleType)
    finally:
        pending.lock.release()
    return True


def _forwarder(module, attr):
    def forward(*args, **kwargs):
        _execute(module)
        return object.__getattribute__(module, attr)(*args, **kwargs)
    forward.__name__ = forward.__qualname__ = attr
    return forward


class _DeferringLoader(importlib.abc.Loader):
    """Creates the module as the real loader would, and leaves it unexecuted."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader_state = _Pending(self.loader)
        object.__setattr__(module, "__class__", DeferredModule)


class _DeferringFinder:
    """Finds the deferred modules with the other finders and defers their code."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        deferred = name in DEFERRED or name in DEFERRED_NAMES
        parent = sys.modules.get(name.rpartition(".")[0])
        if not deferred and type(parent) is DeferredModule:
            # (A deferred submodule waits: its package runs before it does.)
            found = _after_parent(parent, name)
            if found is not None:
                return found
        if not deferred:
            return None
        for finder in sys.meta_path:
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        # Only modules with Python code: an extension module executes as it is created.
        if spec.loader is None or not hasattr(spec.loader, "get_code"):
            return spec
        spec.loader = _DeferringLoader(spec.loader)
        return spec


class _ImportedLoader(importlib.abc.Loader):
    """Hands the import system a module that is already imported."""

    def __init__(self, module):
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        pass


def _after_parent(parent, name):
    """A submodule of a deferred package is being imported: runs the package
    first, as a normal import would (its code may import the submodule, or the
    submodule may need what the package defines). Returns a spec for the
    submodule when the package imported it, else None (found as usual).
    Called under the import system's lock: never waits for another thread."""
    if not _execute(parent, blocking=False):
        return None
    module = sys.modules.get(name)
    if module is None:
        return None
    # The import system would load a module it finds in sys.modules again
    # (its spec, from scratch); from this spec it takes the module as it is.
    del sys.modules[name]
    return importlib.machinery.ModuleSpec(name, _ImportedLoader(module),
                                          origin=getattr(module, "__file__", None))


def install():
    """Defers the DEFERRED modules' imports in this interpreter (before torch is imported)."""
    sys.meta_path.insert(0, _DeferringFinder)


def pending():
    """The deferred modules not executed yet."""
    return sorted(name for name, module in sys.modules.items()
                  if type(module) is DeferredModule)
