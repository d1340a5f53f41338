"""Model control from a model: `load_model`, `unload_model`, `is_model_ready`, and
`get_model_dir`.

The first three act on the server's repository through `_chorus.model_load`,
`model_unload` and `model_ready`; a failure raises TritonModelException with Triton's
prefix and the server's message. They are allowed in `initialize` (BLS is not).

`get_model_dir()` is the directory of the calling model's version (`<model>/<version>`,
as Triton's stub gives it): each model's own modules see a `triton_python_backend_utils`
whose `get_model_dir` knows its model (chorus runs several models in one interpreter). The
function of the shared module, which knows no model, raises.
"""

from typing import Any, Dict, Optional

from .errors import TritonModelException
from .native import chorus_module

__all__ = ["load_model", "unload_model", "is_model_ready", "get_model_dir"]


def _checked_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"'{what}' must be a str, got {type(value)}")
    return value


def _checked_files(model_name: str, files: Any) -> Dict[str, bytes]:
    if files is None:
        return {}
    if not isinstance(files, dict):
        raise TritonModelException(f"failed to load model '{model_name}', files should be a "
                                   "dictionary of file paths and file contents")
    for path, content in files.items():
        _checked_str(path, "files keys")
        if not isinstance(content, bytes):
            raise TypeError(f"the content of file '{path}' must be bytes, got {type(content)}")
    return dict(files)


def _server_message(error: BaseException) -> str:
    return str(error.args[0]) if error.args else str(error)


def load_model(model_name: str, config: str = "", files: Optional[Dict[str, bytes]] = None) -> None:
    """Loads (or reloads) `model_name`; `config` is a JSON config replacing the
    repository's, `files` ("file:<version>/<name>" -> content) files replacing its own."""
    _checked_str(model_name, "model_name")
    _checked_str(config, "config")
    file_map = _checked_files(model_name, files)
    chorus = chorus_module("load_model")
    try:
        chorus.model_load(model_name, config, file_map)
    except chorus.ModelCallFailed as e:
        raise TritonModelException(f"Failed to load model: {_server_message(e)}") from None


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unloads `model_name` (and with `unload_dependents` the models it loaded)."""
    _checked_str(model_name, "model_name")
    if not isinstance(unload_dependents, bool):
        raise TypeError(f"'unload_dependents' must be a bool, got {type(unload_dependents)}")
    chorus = chorus_module("unload_model")
    try:
        chorus.model_unload(model_name, unload_dependents)
    except chorus.ModelCallFailed as e:
        raise TritonModelException(f"Failed to unload model: {_server_message(e)}") from None


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether `model_name` (version `model_version`, "" for the one serving) is ready."""
    _checked_str(model_name, "model_name")
    _checked_str(model_version, "model_version")
    chorus = chorus_module("is_model_ready")
    try:
        return bool(chorus.model_ready(model_name, model_version))
    except chorus.ModelCallFailed as e:
        raise TritonModelException(
            f"Failed to check model readiness: {_server_message(e)}") from None


def get_model_dir() -> str:
    """Raises: only a model's own modules know their model's directory (see above)."""
    raise TritonModelException("get_model_dir() is only available to a model's own modules "
                               "(chorus runs several models in one interpreter)")
