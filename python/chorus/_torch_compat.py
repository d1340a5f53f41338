"""torch compatibility shims: one process, one dispatcher, N interpreters.

Every interpreter imports torch's Python code, and torch registers operators
and kernels from Python at import time (torch.library: prims, nvprims, meta
kernels, decompositions). All interpreters share libtorch, so all of them
register into the one c10 dispatcher. Stock torch assumes it is alone; each
shim below says which assumption it repairs. Ownership of a registration is
decided process-wide by the host (`_chorus.claim_registration`): the first
interpreter to make a registration owns it, and the others do not repeat it in
the dispatcher, so no kernel is overridden (their own kernel functions still
run their own calls, shim 3).

This is the only place chorus changes torch's behaviour.
"""

import contextlib
import os
import sys

import _chorus


def install_import_hook():
    """Applies each shim the moment its module is imported, before torch uses it."""
    sys.meta_path.insert(0, _PostImportHook)


class _PostImportHook:
    """Finds the shimmed modules with the normal finders and shims each after it executes."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        shim = _SHIMS.get(name)
        if shim is None:
            return None
        for finder in sys.meta_path:
            if finder is not cls and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        else:
            return None
        loader = spec.loader
        if loader is None:
            return spec
        original_exec = loader.exec_module

        def exec_module(module):
            original_exec(module)
            shim(module)
            del _SHIMS[name]
            if not _SHIMS:
                sys.meta_path.remove(cls)  # done for good

        loader.exec_module = exec_module  # type: ignore[method-assign]  # the shim, on purpose
        return spec


def _shim_library(library):
    import torch

    Library = library.Library
    original_define = Library.define

    # Shim 1: dispatcher libraries are created by chorus, not by torch._C, so
    # that each interpreter's registrations are removed when it is finalized
    # (Python may never free the objects that would remove them) and Python
    # kernels run in their own interpreter whoever calls them. A namespace may
    # be DEF'd once per process; interpreters after the first open it as a
    # FRAGMENT, which may add definitions to it.
    def _dispatch_library(kind, ns, dispatch_key, file="<chorus>", line=0):
        if kind != "DEF":
            return _DispatchLibrary(kind, ns, dispatch_key, file, line)
        with _claim("namespace:" + ns) as owner:
            return _DispatchLibrary("DEF" if owner else "FRAGMENT", ns, dispatch_key, file, line)

    # Shim 2: an operator schema may be defined once per process; an
    # interpreter whose definition another interpreter made skips it.
    def define(self, schema, alias_analysis="", **options):
        parsed = torch._C.parse_schema(schema)
        qualified = parsed.name if "::" in parsed.name else self.ns + "::" + parsed.name
        with _claim("def:%s.%s" % (qualified, parsed.overload_name)) as owner:
            if not owner:
                return parsed.name
            return original_define(self, schema, alias_analysis, **options)

    torch._C._dispatch_library = _dispatch_library
    Library.define = define
    _shim_fake_impls()
    _shim_load_library()


def _shim_load_library():
    """Shim 5: operator libraries loaded by path (torch.ops.load_library).

    A library that links torch's Python bindings or libpython (torchvision's
    _C before 0.29) must be this interpreter's copy, bound to its own
    bindings, like an extension module; its operators are registered once per
    process by the first interpreter's copy. Others load once per process, as
    in plain Python.
    """
    import ctypes

    import torch._ops
    from torch import _utils_internal

    ops_class = type(torch._ops.ops)
    original_load_library = ops_class.load_library

    def load_library(self, path):
        resolved = _utils_internal.resolve_library_path(path)
        if not _chorus.references_python(resolved):
            return original_load_library(self, path)
        ctypes.CDLL(_chorus.prepare_extension(resolved), mode=os.RTLD_LOCAL)
        self.loaded_libraries.add(resolved)

    ops_class.load_library = load_library


def _shim_fake_impls():
    """Shim 4: fake (meta) implementations registered from Python.

    torch's register_fake refuses an operator that already has a Meta
    kernel in the dispatcher, and the dispatcher is the process': the second
    interpreter importing torch would fail on torch's own register_fake calls.
    The first interpreter registers as stock torch does; the others record the
    fake implementation in their own registry (their FakeTensor uses it) and
    leave the dispatcher's kernel to the first (shim 3 skips it).
    """
    import torch._library.fake_impl as fake_impl
    holder = fake_impl.FakeImplHolder
    original_register = holder.register

    def register(self, func, source, lib, *, allow_override=False):
        with _claim("fake:" + self.qualname) as owner:
            return original_register(self, func, source, lib,
                                     allow_override=allow_override or not owner)

    holder.register = register


@contextlib.contextmanager
def _claim(key):
    """Yields whether this interpreter makes registration `key`; reports the outcome.

    When another interpreter owns it, waits until that one has made it, so
    code that skips a registration can use it right away.
    """
    owner = _chorus.claim_registration(key)
    made = False
    try:
        yield owner
        made = True
    finally:
        if owner:
            _chorus.complete_registration(key, made)


class _DispatchLibrary:
    """Stands in for torch._C._DispatchModule: a dispatcher library owned by chorus."""

    def __init__(self, kind, ns, dispatch_key, file, line):
        self._handle = _chorus.open_library(kind, ns, dispatch_key, file, line)
        self._ns = ns
        self._dispatch_key = dispatch_key

    def define(self, schema, alias_analysis="", tags=()):
        return _chorus.library_define(self._handle, schema, alias_analysis,
                                      [int(tag) for tag in tags])

    # Shim 3: a kernel for an (operator, dispatch key) is registered once per
    # process; another interpreter registering it again would override the
    # first ("Overriding a previously registered kernel"). The first stays in
    # the dispatcher; every other interpreter that registers the same key
    # hands chorus its own function, which runs its own calls (no tensor
    # crosses); calls from interpreters without one reach the first's.
    def impl(self, name, dispatch_key, fn, with_keyset=False):
        op = name.split("::")[-1]
        key = "impl:%s/%s/%s" % (self._ns, op, dispatch_key or self._dispatch_key)
        with _claim(key) as owner:
            if owner:
                _chorus.library_impl(self._handle, name, dispatch_key, _kernel(fn), with_keyset,
                                     key)
            elif _kernel(fn) is not None:
                _chorus.add_kernel_function(key, fn, with_keyset)

    def fallback(self, dispatch_key, fn, with_keyset=False):
        _chorus.library_fallback(self._handle, dispatch_key, _kernel(fn), with_keyset)

    def fallback_fallthrough(self, dispatch_key=""):
        _chorus.library_fallback(self._handle, dispatch_key, None, False)

    def reset(self):
        _chorus.library_reset(self._handle)


def _kernel(fn):
    """The kernel chorus registers for `fn`: None stands for torch's fallthrough."""
    import torch.library

    return None if fn is getattr(torch.library, "fallthrough_kernel", object()) else fn


def _shim_inductor_codecache(codecache):
    """Shim 6: torch.compile's C++ kernels (inductor).

    Inductor hands each compiled kernel module a function address of this
    interpreter's torch through a process-wide environment variable, read
    when the module initializes: set, then load. Two interpreters doing that
    at once could each load the other's address. chorus makes each
    set-and-load one step for the process. The module itself is this
    interpreter's private copy (chorus._bootstrap), even when two
    interpreters compiled the same kernel to the same file.
    """
    bindings = getattr(codecache, "CppPythonBindingsCodeCache", None)
    if bindings is None:
        return
    load = getattr(bindings, "__dict__", {}).get("_load_library_inner")
    if not isinstance(load, classmethod):
        return
    original = load.__func__

    def _load_library_inner(cls, *args, **kwargs):
        _chorus.begin_exclusive()
        try:
            return original(cls, *args, **kwargs)
        finally:
            _chorus.end_exclusive()

    bindings._load_library_inner = classmethod(_load_library_inner)


_SHIMS = {
    "torch.library": _shim_library,
    "torch._inductor.codecache": _shim_inductor_codecache,
}
