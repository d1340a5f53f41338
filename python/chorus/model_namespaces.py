"""Each model's own modules, side by side in one interpreter.

Triton and TorchServe import a model's code in a process of its own, with the model's
folders on sys.path, so the model's `import util` finds its own `util.py`. chorus runs
many models in one interpreter, where two models' `util.py` would collide in sys.modules.
A `ModelNamespace` gives a model's modules names of their own instead:

- the model's package, `_chorus_models.<key>`, searches the model's folders in the
  order given (Triton: the version dir, then the model dir; TorchServe: the model dir);
  a file loaded with `load_file` (Triton's `model.py`, TorchServe's handler) is
  `<package>.<name>`;
- every module loaded from those folders runs with builtins of its own whose
  `__import__` sends a bare top-level name found in the model's folders (`import util`,
  `from util import x`, also inside functions at run time) to `<package>.util`; relative
  imports (`from . import x`) resolve in the package as usual;
- which wins when a name is both installed and in the model's folders follows the
  server's sys.path: in Triton the model's folders come last, so the installed module
  wins (`folders_first=False`); TorchServe puts the model dir on PYTHONPATH, before
  site-packages, so the model's file wins (`folders_first=True`), except over the
  standard library's modules, which a TorchServe worker has imported before it loads a
  handler;
- `overrides` names modules to give the model for some names instead (chorus gives each
  Triton model its own `triton_python_backend_utils`);
- while `active()`, importlib's own imports of a bare name of the model's modules on that
  thread give them too (TorchServe's BaseHandler imports an archive's model file with
  `importlib.import_module`, finding it on the worker's sys.path).

Where chorus differs: `import util` and `from . import util` give the same module (Triton
loads it twice, as `util` and `1.util`); `importlib.import_module("util")` does not go
through `__import__`, so outside `active()` it finds only installed modules; and a model's
builtins are a copy made when it loads (later additions to `builtins` are not seen).
"""

import builtins
import contextlib
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
import threading
from types import ModuleType
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

__all__ = ["ModelNamespace", "ROOT"]

ROOT = "_chorus_models"

_real_import = builtins.__import__


class _NamespacedLoader(importlib.machinery.SourceFileLoader):
    """Runs a model's source file with the model's builtins."""

    def __init__(self, fullname: str, path: str, model_builtins: Dict[str, Any]):
        super().__init__(fullname, path)
        self._builtins = model_builtins

    def exec_module(self, module: ModuleType) -> None:
        # exec() keeps a module's own __builtins__, and every function defined in the
        # module looks its imports up there.
        module.__dict__["__builtins__"] = self._builtins
        super().exec_module(module)


class _AliasLoader(importlib.abc.Loader):
    """Gives a bare name (`model`) the module the active namespace has under its own name
    (`<package>.model`), importing it there first."""

    def __init__(self, namespace: "ModelNamespace", name: str):
        self._namespace, self._name = namespace, name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(f"{self._namespace.package_name}.{self._name}")
        self._namespace._aliases[self._name] = (module, module.__spec__)
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._namespace._aliases[self._name][1]  # its own again


# The namespace whose bare module names importlib resolves on this thread (see active()).
_active = threading.local()


class _ModelModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of every namespace's package, and the bare names of the active
    namespace's modules (registered in sys.meta_path)."""

    def __init__(self) -> None:
        self.namespaces: Dict[str, "ModelNamespace"] = {}

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        if not fullname.startswith(ROOT + "."):
            active: Optional[ModelNamespace] = getattr(_active, "namespace", None)
            if path is None and active is not None and "." not in fullname and \
                    active._is_model_module(fullname):
                return importlib.machinery.ModuleSpec(fullname, _AliasLoader(active, fullname))
            return None
        namespace = self.namespaces.get(".".join(fullname.split(".")[:2]))
        if namespace is None or path is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec  # a namespace package, or a compiled module: as found
        assert spec.origin is not None
        loader = _NamespacedLoader(fullname, spec.origin, namespace.builtins)
        return importlib.util.spec_from_file_location(
            fullname, spec.origin, loader=loader,
            submodule_search_locations=spec.submodule_search_locations)


def _finder() -> _ModelModuleFinder:
    """This interpreter's finder, put in sys.meta_path and sys.modules[ROOT] the first time."""
    for finder in sys.meta_path:
        if isinstance(finder, _ModelModuleFinder):
            return finder
    finder = _ModelModuleFinder()
    sys.meta_path.insert(0, finder)
    root = ModuleType(ROOT, "The modules of the Python models chorus runs.")
    root.__path__ = []
    sys.modules.setdefault(ROOT, root)
    return finder


def _identifier(key: str) -> str:
    """A Python identifier unique to `key`: readable, with a hash against collisions."""
    readable = re.sub(r"\W", "_", key)[:40]
    return f"m_{readable}_{hashlib.sha256(key.encode()).hexdigest()[:10]}"


class ModelNamespace:
    """The modules of one model: its files import each other under names of their own."""

    def __init__(self, key: str, search_dirs: List[str],
                 overrides: Optional[Mapping[str, ModuleType]] = None,
                 folders_first: bool = False):
        self.package_name = f"{ROOT}.{_identifier(key)}"
        self.search_dirs = list(search_dirs)
        self._folders_first = folders_first
        self._overrides = dict(overrides or {})
        # Top-level name -> whether it is a module of the model's folders.
        self._is_own_module: Dict[str, bool] = {}
        # Bare name -> (module, its own spec), given while active() (see _AliasLoader).
        self._aliases: Dict[str, Tuple[ModuleType, Any]] = {}
        self.builtins = dict(builtins.__dict__)
        self.builtins["__import__"] = self._import
        finder = _finder()
        package = ModuleType(self.package_name)
        package.__path__ = list(search_dirs)
        package.__package__ = self.package_name
        sys.modules[self.package_name] = package
        finder.namespaces[self.package_name] = self

    def load_file(self, path: str, module_name: str) -> ModuleType:
        """Runs the source file `path` as the module `<package>.<module_name>`."""
        fullname = f"{self.package_name}.{module_name}"
        loader = _NamespacedLoader(fullname, path, self.builtins)
        spec = importlib.util.spec_from_file_location(fullname, path, loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[fullname] = module
        try:
            loader.exec_module(module)
        except BaseException:
            del sys.modules[fullname]
            raise
        return module

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """While the scope lasts, on this thread, importlib's own import of a bare name of
        the model's modules (`importlib.import_module("model")`, which does not go through
        `__import__`: TorchServe's BaseHandler imports an archive's model file so) gives
        the model's module, as the server's sys.path would; sys.modules forgets the bare
        names when the scope ends."""
        previous = getattr(_active, "namespace", None)
        _active.namespace = self
        try:
            yield
        finally:
            _active.namespace = previous
            for name, (module, _) in self._aliases.items():
                if sys.modules.get(name) is module:
                    del sys.modules[name]
            self._aliases.clear()

    def close(self) -> None:
        """Forgets the model's modules (in sys.modules and the finder)."""
        _finder().namespaces.pop(self.package_name, None)
        prefix = self.package_name + "."
        for name in [n for n in sys.modules if n == self.package_name or n.startswith(prefix)]:
            del sys.modules[name]

    def _import(self, name: str, globals: Any = None, locals: Any = None,
                fromlist: Sequence[str] = (), level: int = 0) -> ModuleType:
        """`__import__` for the model's modules."""
        if level == 0:
            top = name.partition(".")[0]
            if name in self._overrides:
                return self._overrides[name]
            if self._is_model_module(top):
                return self._import_own(name, fromlist)
        return _real_import(name, globals, locals, fromlist, level)

    def _import_own(self, name: str, fromlist: Sequence[str]) -> ModuleType:
        fullname = f"{self.package_name}.{name}"
        if fromlist:
            return _real_import(fullname, None, None, fromlist, 0)  # the module named
        importlib.import_module(fullname)
        return sys.modules[f"{self.package_name}.{name.partition('.')[0]}"]  # its top

    def _is_model_module(self, top: str) -> bool:
        known = self._is_own_module.get(top)
        if known is None:
            known = self._is_own_module[top] = self._resolves_to_folders(top)
        return known

    def _resolves_to_folders(self, top: str) -> bool:
        if top in sys.stdlib_module_names or top in sys.builtin_module_names:
            return False
        if not self._folders_first and (top in sys.modules or
                                        importlib.util.find_spec(top) is not None):
            return False  # installed: Triton's sys.path finds it first
        return importlib.machinery.PathFinder.find_spec(top, self.search_dirs) is not None
