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
import importlib.util
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


def _triton_backend_utils_finder():
    """A finder and loader for `import triton_python_backend_utils` (and
    `c_python_backend_utils`) in any chorus interpreter: chorus' own module (chorus.triton,
    docs/triton.md), set up on first use.

    Made once install()'s hook is in place: from Python 3.13 importing importlib.abc
    imports importlib.resources, tempfile and random, and with them C extensions (math,
    zlib, _bz2) that must be this interpreter's private copies."""
    import importlib.abc

    class TritonBackendUtilsFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        NAMES = ("triton_python_backend_utils", "c_python_backend_utils")

        def find_spec(self, name, path=None, target=None):
            if name not in self.NAMES:
                return None
            return importlib.util.spec_from_loader(name, self)

        def create_module(self, spec):
            import chorus.triton.backend  # noqa: F401  # registers both names in sys.modules
            return sys.modules[spec.name]

        def exec_module(self, module):
            pass

    return TritonBackendUtilsFinder()


# Python packages that drive a GPU and nothing else, which torch imports
# whenever they are installed (as its CUDA wheels install them): triton
# (torch._dynamo imports it, so prims, torch.export and FSDP do; its extension
# is 500 MB) and NVIDIA's CUDA bindings (torch.cuda imports them at
# `import torch`; 10 MB of modules and extension copies per interpreter).
GPU_ONLY_PACKAGES = ("triton", "cuda.bindings")


def install(load_gpu_packages, defer_imports=True):
    """Installs the private-copy loader, then the torch shims and deferred
    imports (_deferred_imports.py; unless `defer_imports` is false), then site.

    Without `load_gpu_packages` (the host found no GPU), the GPU_ONLY_PACKAGES
    are made not found, as in torch's CPU wheels, which do not bring them:
    torch takes their absence in its stride, and every interpreter would
    otherwise copy, map and import them for nothing.
    """
    _ExtensionFileLoader.create_module = _create_private_module  # type: ignore[method-assign]
    # threading takes the thread that first imports it for the main one: this
    # start-up thread, on which the host also finalizes the interpreter
    # (interpreter/src/home_thread.h). Imported later from a session's thread,
    # finalization would wait for that thread to end.
    import threading  # noqa: F401
    if not load_gpu_packages:
        for name in GPU_ONLY_PACKAGES:
            sys.modules[name] = None  # type: ignore[assignment]  # how Python blocks a module

    from chorus import _torch_compat
    _torch_compat.install_import_hook()
    if defer_imports:
        from chorus import _deferred_imports
        _deferred_imports.install()
    _report_os_exit()
    sys.meta_path.insert(0, _triton_backend_utils_finder())

    import site
    site.main()
