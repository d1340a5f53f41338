"""The entry points chorus' C++ side calls to run Triton Python-backend models.

Each call comes on a thread holding the GIL of the interpreter concerned, and takes and
returns plain values; an exception goes back to C++, which logs it and fails the load or
the batch with its message. Calls to one instance never overlap.

    load(model_key, model_name, version, model_dir, file_name)
    auto_complete_config(model_key, config_json) -> config_json
    create_instance(model_key, instance_name, args)
    execute(model_key, instance_name, requests, decoupled)
    has_is_ready(model_key) -> bool
    is_ready(model_key, instance_name) -> bool
    finalize(model_key, instance_name)
    unload(model_key)

`model_key` names one load of one version of a model in the process (the C++ side may load
it in several interpreters, once in each); `instance_name` is Triton's name of one of its
instances (`<group>_<index>`, the same for every load and version of the model).

Importing this module registers `chorus.triton.utils` as `triton_python_backend_utils`
and `chorus.triton.c_utils` as `c_python_backend_utils` in this interpreter; nothing of
the kind is installed on disk, so a Triton install outside chorus is not shadowed.

Where chorus differs from Triton: `auto_complete_config` runs in an interpreter where the
model file is loaded (Triton runs it in a throw-away process); the file's modules are
forgotten after it, and imported again for the instances. A checkpoint `torch.load` reads
from the model's folder is mapped, not read (`chorus.mapped_weights`): one copy for every
instance.
"""

import dataclasses
import json
import os
import sys
from types import ModuleType
from typing import Any, Dict, List, Tuple

from . import bls, c_utils, utils
from .. import mapped_weights as weights
from .errors import TritonModelException
from .instance import ModelInstance
from .model_config import ModelConfig
from ..model_namespaces import ModelNamespace

__all__ = ["load", "auto_complete_config", "create_instance", "execute", "is_ready", "finalize",
           "unload"]

sys.modules["triton_python_backend_utils"] = utils
sys.modules["c_python_backend_utils"] = c_utils


@dataclasses.dataclass
class _LoadedModel:
    name: str
    model_dir: str
    model_file: str
    namespace: ModelNamespace
    model_class: type


_models: Dict[str, _LoadedModel] = {}
_instances: Dict[Tuple[str, str], ModelInstance] = {}  # by (model_key, instance_name)


def _model_utils(version_dir: str) -> ModuleType:
    """A `triton_python_backend_utils` of the model's own: the shared module's names, with a
    `get_model_dir()` giving the model's version directory (as Triton's stub does)."""
    module = ModuleType(utils.__name__, utils.__doc__)
    module.__dict__.update({name: value for name, value in vars(utils).items()
                            if not name.startswith("__")})

    def get_model_dir() -> str:
        return version_dir

    module.__dict__["get_model_dir"] = get_model_dir
    return module


def load(model_key: str, model_name: str, version: str, model_dir: str, file_name: str) -> None:
    """Imports `<model_dir>/<version>/<file_name>` in a namespace of its own, once per
    interpreter for `model_key`."""
    if model_key in _models:
        return
    version_dir = os.path.join(model_dir, version)
    path = os.path.join(version_dir, file_name)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Python model file not found in '{path}'")
    if not file_name.endswith(".py"):
        raise TritonModelException(f"Model name must end with '.py'. Model name is "
                                   f"\"{file_name}\".")
    namespace = ModelNamespace(model_key, [version_dir, model_dir],
                               {"triton_python_backend_utils": _model_utils(version_dir)})
    weights.share_folder(model_dir)
    try:
        module = namespace.load_file(path, file_name[:-len(".py")])
        model_class = getattr(module, "TritonPythonModel", None)
        if not isinstance(model_class, type):
            raise AttributeError(f"Python model file '{path}' does not define the class "
                                 "'TritonPythonModel'")
    except BaseException:
        namespace.close()
        weights.forget_folder(model_dir)
        raise
    _models[model_key] = _LoadedModel(model_name, model_dir, path, namespace, model_class)


def auto_complete_config(model_key: str, config_json: str) -> str:
    """The config completed by the model's `auto_complete_config` (as JSON), or
    `config_json` unchanged when the model has none."""
    model = _models[model_key]
    complete = getattr(model.model_class, "auto_complete_config", None)
    if complete is None:
        return config_json
    with bls.forbidden():
        completed = complete(ModelConfig(json.loads(config_json)))
    if not isinstance(completed, ModelConfig):
        raise TritonModelException(f"auto_complete_config function in model '{model.name}' "
                                   "must return a valid pb.ModelConfig object.")
    return json.dumps(completed.as_dict())


def _output_names(args: Dict[str, str]) -> List[str]:
    """The outputs the model's config declares (args["model_config"])."""
    try:
        config = json.loads(args.get("model_config", "{}"))
        return [output["name"] for output in config.get("output", [])]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []


# The keys of initialize()'s args, in the order Triton's dict has them.
_ARGS_ORDER = ("model_config", "model_instance_kind", "model_instance_name",
               "model_instance_device_id", "model_repository", "model_version", "model_name")


def _triton_args(args: Dict[str, str]) -> Dict[str, str]:
    """`args` with Triton's keys first, in Triton's order (other keys after them)."""
    ordered = {key: args[key] for key in _ARGS_ORDER if key in args}
    ordered.update((key, value) for key, value in args.items() if key not in ordered)
    return ordered


def create_instance(model_key: str, instance_name: str, args: Dict[str, str]) -> None:
    """Makes the instance `instance_name`: `TritonPythonModel()`, then its `initialize(args)`
    (args as Triton gives them: model_config, model_instance_kind...)."""
    model = _models[model_key]
    with bls.forbidden():
        model_object = model.model_class()
        initialize = getattr(model_object, "initialize", None)
        if initialize is not None:
            initialize(_triton_args(args))
    _instances[(model_key, instance_name)] = ModelInstance(
        instance_name, model_object, model.model_file, _output_names(args))


def execute(model_key: str, instance_name: str, requests: List[Any], decoupled: bool) -> None:
    """Runs the instance's `execute` on a batch of received requests, each
    (handle, inputs, bytes_shapes, requested_output_names) with its handle a
    _chorus.HostObject (server/python_backend's PythonBackendRequest), and answers every
    request."""
    _instances[(model_key, instance_name)].execute(requests, decoupled)


def has_is_ready(model_key: str) -> bool:
    """Whether the model's class defines `is_ready` (else it is ready once loaded)."""
    return callable(getattr(_models[model_key].model_class, "is_ready", None))


def is_ready(model_key: str, instance_name: str) -> bool:
    instance = _instances.get((model_key, instance_name))
    return instance is not None and instance.is_ready()


def finalize(model_key: str, instance_name: str) -> None:
    """Calls the instance's `finalize()` (errors logged, not raised) and forgets it."""
    instance = _instances.pop((model_key, instance_name), None)
    if instance is not None:
        instance.finalize()


def unload(model_key: str) -> None:
    """Forgets the model's modules here (its instances here are finalized by then)."""
    model = _models.pop(model_key, None)
    if model is not None:
        model.namespace.close()
        weights.forget_folder(model.model_dir)
