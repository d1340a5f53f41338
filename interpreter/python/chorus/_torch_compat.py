"""torch compatibility shims: one process, one dispatcher, N interpreters.

Every interpreter imports torch's Python code, and torch registers operators
and kernels from Python at import time (torch.library: prims, nvprims, meta
kernels, decompositions). All interpreters share libtorch, so all of them
register into the one c10 dispatcher. Stock torch assumes it is alone; each
shim below says which assumption it repairs. Ownership of a registration is
decided process-wide by the host (`_chorus.claim_registration`): the first
interpreter to make a registration owns it, and the others skip theirs, so no
kernel is overridden and each stays with the interpreter that registered it.

This is the only place chorus changes torch's behaviour.
"""

import sys

import _chorus

_SHIMMED_MODULE = "torch.library"


def install_import_hook():
    """Applies the shims the moment torch.library is imported, before torch uses it."""
    sys.meta_path.insert(0, _TorchLibraryHook)


class _TorchLibraryHook:
    """Finds torch.library with the normal finders and shims it after it executes."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != _SHIMMED_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is not cls and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        else:
            return None
        original_exec = spec.loader.exec_module

        def exec_module(module):
            original_exec(module)
            _shim_library(module)
            sys.meta_path.remove(cls)  # done for good

        spec.loader.exec_module = exec_module
        return spec


def _shim_library(library):
    import torch

    Library = library.Library
    original_init = Library.__init__
    original_define = Library.define
    original_impl = Library.impl

    # Shim 1: a namespace may be DEF'd (TORCH_LIBRARY) once per process; the
    # dispatcher rejects a second DEF. Interpreters after the first open the
    # namespace as a FRAGMENT, which may add definitions to it.
    def __init__(self, ns, kind, dispatch_key=""):
        if kind == "DEF" and not _chorus.claim_registration("namespace:" + ns):
            original_init(self, ns, "IMPL", dispatch_key)  # torch's own argument checks
            self.m = torch._C._dispatch_library("FRAGMENT", ns, dispatch_key, __file__, 0)
            self.kind = kind
        else:
            original_init(self, ns, kind, dispatch_key)

    # Shim 2: an operator schema may be defined once per process; an
    # interpreter whose definition another interpreter already made skips it.
    def define(self, schema, alias_analysis=""):
        parsed = torch._C.parse_schema(schema)
        qualified = parsed.name if "::" in parsed.name else self.ns + "::" + parsed.name
        if not _chorus.claim_registration("def:%s.%s" % (qualified, parsed.overload_name)):
            return parsed.name
        return original_define(self, schema, alias_analysis)

    # Shim 3: a kernel for an (operator, dispatch key) is registered once per
    # process, by the first interpreter; others would override it (torch warns
    # "Overriding a previously registered kernel"). The owner registers it
    # through chorus' kernel, which runs the function in the owner's
    # interpreter with tensors crossing as aliases, so every interpreter can
    # call it (torch's kernel wrapper would hand it tensors tagged with the
    # calling interpreter, which the owner cannot touch).
    def impl(self, op_name, fn, dispatch_key=""):
        key = dispatch_key or self.dispatch_key
        name = op_name if isinstance(op_name, str) else _overload_name(op_name)
        claim = "impl:%s/%s/%s" % (self.ns, name.split("::")[-1], key)
        if not _chorus.claim_registration(claim):
            return
        dispatch_module = self.m
        self.m = _KernelRouter(self)
        try:
            original_impl(self, op_name, fn, dispatch_key)  # torch's checks and bookkeeping
        finally:
            self.m = dispatch_module

    Library.__init__ = __init__
    Library.define = define
    Library.impl = impl


def _overload_name(op):
    name = op._schema.name
    return name + "." + op._schema.overload_name if op._schema.overload_name else name


class _KernelRouter:
    """Stands in for Library.m during Library.impl: registers through chorus."""

    def __init__(self, library):
        self._library = library

    def impl(self, name, dispatch_key, fn):
        handles = self._library.__dict__.setdefault("_chorus_kernels", [])
        handles.append(_chorus.register_python_kernel(self._library.ns, name, dispatch_key, fn))
