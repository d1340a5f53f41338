"""Start-up of a chorus interpreter: private copies of C extensions.

Each interpreter must run its own copy of every C extension module, bound to
its own copy of libpython (see docs/interpreter.md). `install()` makes
Python's one extension loader (importlib.machinery.ExtensionFileLoader) load
this interpreter's private copy, prepared and scoped by the host, while the
module keeps its real __file__. Every way of loading an extension goes through
that loader: `import`, and loading by file path
(importlib.util.spec_from_file_location + module_from_spec, which torch's
inductor and triton use for the kernels they compile).
"""

import importlib.machinery
import os
import sys

import _chorus

_ExtensionFileLoader = importlib.machinery.ExtensionFileLoader


def _create_private_module(loader, spec):
    """ExtensionFileLoader.create_module, with this interpreter's copy of the file."""
    import _imp

    copy = _chorus.prepare_extension(loader.path)
    private_spec = importlib.machinery.ModuleSpec(spec.name, loader, origin=copy)
    # RTLD_GLOBAL would publish this interpreter's copies to every later
    # interpreter's symbol lookups; extensions are always loaded local.
    flags = sys.getdlopenflags()
    sys.setdlopenflags(os.RTLD_NOW)
    # torch._C makes its own autograd engine libtorch's process-wide default
    # as it initializes; the host keeps each interpreter's and routes the
    # default (one interpreter's torch._C at a time).
    initializes_torch = spec.name == "torch._C"
    if initializes_torch:
        _chorus.begin_exclusive()
    try:
        module = _imp.create_dynamic(private_spec)
        if initializes_torch:
            _chorus.take_autograd_engine()
    finally:
        sys.setdlopenflags(flags)
        if initializes_torch:
            _chorus.end_exclusive()
    # Single-phase modules record the file they were loaded from; report the
    # real one, as the stock loader does.
    module.__file__ = loader.path
    return module


def _report_os_exit():
    """Model code that ends the process with os._exit is named in the log: the
    request it was running, its interpreter and Python stack (as a crash is)."""
    import os

    import _chorus
    real_exit = os._exit

    def _exit(status):
        try:
            _chorus.report_exit(int(status))
        finally:
            real_exit(status)
    _exit.__doc__ = real_exit.__doc__
    os._exit = _exit


def install(load_triton):
    """Installs the private-copy loader, then the torch shims, then site.

    Without `load_triton` (the host found no GPU), triton is made not found,
    as in torch's CPU wheels: torch imports it whenever it is installed
    (torch._dynamo does, so prims, torch.export and FSDP do), it compiles GPU
    kernels only, and its extension is 500 MB, which every interpreter would
    copy and map.
    """
    _ExtensionFileLoader.create_module = _create_private_module  # type: ignore[method-assign]
    if not load_triton:
        sys.modules["triton"] = None  # type: ignore[assignment]  # how Python blocks a module

    from chorus import _torch_compat
    _torch_compat.install_import_hook()
    _report_os_exit()

    import site
    site.main()
