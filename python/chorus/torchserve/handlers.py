"""The entry point a `.mar` manifest's handler names, found as TorchServe's
`ts/model_loader.py` finds it.

The handler names a module and optionally a function (`handler.py`, `handler`,
`handler:fn`; chorus' C++ side has already split it). The module is the archive's own
file when it has one, else an installed module of that name, else one of TorchServe's
default handlers (`ts.torch_handler.<name>`). The entry point is then:

- the function named, or the module's `handle` if it has one; its initialization is
  `fn(None, context)`;
- otherwise the one class defined in the module (not imported into it), instantiated:
  `instance.handle`, initialized by `instance.initialize(context)`.

An envelope (`body`, `json`, `kserve`, `kservev2`: `ts.torch_handler.request_envelope`)
wraps the entry point when the manifest or the registration names one.

Where chorus differs from TorchServe: the archive's modules are loaded in a namespace of
the worker's own (`chorus.model_namespaces`), so each worker has its own module globals
(as each TorchServe worker, a process, has) and two archives' `model.py` do not collide.
"""

import importlib
import inspect
import os
from types import ModuleType
from typing import Any, Callable, List, Optional, Tuple

from ..model_namespaces import ModelNamespace

__all__ = ["EntryPoint", "load_entry_point"]

# What the handler's initialization and its per-batch call are.
EntryPoint = Tuple[Callable[[Any, Any], Any], Callable[[Any], Any]]


def _in_archive(model_dir: str, module: str) -> bool:
    top = module.partition(".")[0]
    return (os.path.isfile(os.path.join(model_dir, top + ".py")) or
            os.path.isfile(os.path.join(model_dir, top, "__init__.py")))


def _handler_module(namespace: ModelNamespace, model_dir: str, module: str) -> ModuleType:
    """The module the handler names: the archive's, an installed one, or a default handler."""
    if _in_archive(model_dir, module):
        return importlib.import_module(f"{namespace.package_name}.{module}")
    try:
        return importlib.import_module(module)
    except ImportError:
        return importlib.import_module(f".{module}", "ts.torch_handler")


def _classes_defined_in(module: ModuleType) -> List[type]:
    return [member for _, member in inspect.getmembers(module, inspect.isclass)
            if member.__module__ == module.__name__]


def _class_entry_point(module: ModuleType) -> EntryPoint:
    classes = _classes_defined_in(module)
    if len(classes) != 1:
        raise ValueError("Expected only one class in custom service code or a function entry "
                         f"point {classes}")
    service = classes[0]()
    if not hasattr(service, "handle"):
        raise ValueError(f"Expect handle method in class {classes[0]}")
    return service.handle, service.initialize


def _envelope_class(envelope: str) -> type:
    module = importlib.import_module(f".{envelope}", "ts.torch_handler.request_envelope")
    return _classes_defined_in(module)[0]


def load_entry_point(namespace: ModelNamespace, model_dir: str, module: str, function: str,
                     envelope: Optional[str]) -> EntryPoint:
    """(handle, initialize) of the handler `module`[:`function`] of the archive in
    `model_dir`, its modules loaded in `namespace`. Raises what TorchServe's loader raises
    (ImportError for a module found nowhere, ValueError for a module with no entry point)."""
    handler_module = _handler_module(namespace, model_dir, module)
    function = function or "handle"
    if hasattr(handler_module, function):
        entry = getattr(handler_module, function)
        handle, initialize = entry, lambda context: entry(None, context)
    else:
        handle, initialize = _class_entry_point(handler_module)
    if envelope:
        handle = _envelope_class(envelope)(handle).handle
    return handle, initialize
