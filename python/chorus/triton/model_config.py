"""`pb_utils.ModelConfig`, the object `auto_complete_config` completes, and the helpers
that read a parsed config.

The rules and messages are Triton's: inputs and outputs merge with same-named ones the
config declares only where they agree, the batch size may only grow, dynamic batching
cannot replace another scheduler, and an explicitly configured `decoupled` stays.

Where chorus differs from Triton: `ModelConfig` takes the config as a dict as well as
JSON text, and fills in `input`, `output`, `max_batch_size` and `name` when the config
has none (Triton's server always writes them), so `as_dict()` has those keys.
"""

import json
from typing import Any, Dict, List, Optional

__all__ = ["ModelConfig", "get_input_config_by_name", "get_output_config_by_name",
           "using_decoupled_model_transaction_policy"]

_INPUT_PROPERTIES = ("name", "data_type", "dims", "optional")
_OUTPUT_PROPERTIES = ("name", "data_type", "dims")


class ModelConfig:
    """A model's configuration (as Triton's JSON) that `auto_complete_config` may extend."""

    def __init__(self, model_config: Any):
        is_text = isinstance(model_config, (str, bytes))
        config = json.loads(model_config) if is_text else model_config
        if not isinstance(config, dict):
            raise TypeError(f"ModelConfig(): expected a dict or JSON text, got {type(config)}")
        config.setdefault("name", "")
        config.setdefault("max_batch_size", 0)
        config.setdefault("input", [])
        config.setdefault("output", [])
        self._model_config = config  # Triton's attribute name, which some models read

    def as_dict(self) -> Dict[str, Any]:
        """The configuration itself (changes to it are changes to the config)."""
        return self._model_config

    def _model_name(self) -> str:
        return str(self._model_config["name"])

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Sets max_batch_size; ValueError if the config declares a larger one."""
        configured = self._model_config["max_batch_size"]
        if configured > max_batch_size:
            raise ValueError(f"configuration specified max_batch_size {configured}, but in "
                             f"auto-complete-config function for model '{self._model_name()}' "
                             f"specified max_batch_size {max_batch_size}")
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        """Adds `dynamic_batching {}` unless present; ValueError if the config uses
        sequence batching or ensemble scheduling."""
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(f"Configuration specified scheduling_choice as '{scheduler}', "
                                 "but auto-complete-config function for model "
                                 f"'{self._model_name()}' tries to set scheduling_choice as "
                                 "'dynamic_batching'")
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: Dict[str, Any]) -> None:
        """Adds an input {name, data_type, dims[, optional]}, or completes the config's
        input of that name; ValueError where they disagree."""
        self._add_tensor("input", input, _INPUT_PROPERTIES)

    def add_output(self, output: Dict[str, Any]) -> None:
        """Adds an output {name, data_type, dims}, or completes the config's output of
        that name; ValueError where they disagree."""
        self._add_tensor("output", output, _OUTPUT_PROPERTIES)

    def _add_tensor(self, kind: str, tensor: Dict[str, Any], properties: tuple) -> None:
        self._check_properties(kind, tensor, properties)
        for configured in self._model_config[kind]:
            if configured.get("name") == tensor["name"]:
                self._merge(kind, configured, tensor)
                return
        self._model_config[kind].append(tensor)

    def _check_properties(self, kind: str, tensor: Dict[str, Any], properties: tuple) -> None:
        where = f"in auto-complete-config function for model '{self._model_name()}'"
        named = f"{kind} '{tensor.get('name', '')}' {where}"
        if any(key not in properties for key in tensor):
            listed = ", ".join(f"'{p}'" for p in properties[:-1]) + f" and '{properties[-1]}'"
            raise ValueError(f"{named} contains property other than {listed}.")
        if "name" not in tensor:
            raise ValueError(f"{kind} {where} is missing 'name' property.")
        for required in ("data_type", "dims"):
            if required not in tensor:
                raise ValueError(f"{named} is missing '{required}' property.")

    def _merge(self, kind: str, configured: Dict[str, Any], tensor: Dict[str, Any]) -> None:
        model, name = self._model_name(), tensor["name"]
        data_type = configured.get("data_type", "TYPE_INVALID")
        if data_type not in ("TYPE_INVALID", tensor["data_type"]):
            raise ValueError(f"unable to load model '{model}', configuration expects datatype "
                             f"{data_type} for {kind} '{name}', model provides "
                             f"{tensor['data_type']}")
        dims = configured.get("dims") or []
        if dims and dims != tensor["dims"]:
            raise ValueError(f"model '{model}', tensor '{name}': the model expects dims "
                             f"{tensor['dims']} but the model configuration specifies dims "
                             f"{dims}")
        if "optional" in configured and "optional" in tensor and \
                configured["optional"] != tensor["optional"]:
            raise ValueError(f"model '{model}', tensor '{name}': the model expects optional "
                             f"{tensor['optional']} but the model configuration specifies "
                             f"optional {configured['optional']}")
        configured["data_type"] = tensor["data_type"]
        configured["dims"] = tensor["dims"]
        if "optional" in tensor:
            configured["optional"] = tensor["optional"]

    def set_model_transaction_policy(self, transaction_policy_dict: Dict[str, Any]) -> None:
        """Sets `model_transaction_policy` ({"decoupled": bool}); ValueError if the config
        sets `decoupled` otherwise."""
        model = self._model_name()
        if any(key != "decoupled" for key in transaction_policy_dict):
            raise ValueError("model transaction property in auto-complete-config function for "
                             f"model '{model}' contains property other than 'decoupled'.")
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" not in transaction_policy_dict:
            return
        decoupled = transaction_policy_dict["decoupled"]
        if "decoupled" in policy and policy["decoupled"] != decoupled:
            raise ValueError("trying to change decoupled property in auto-complete-config for "
                             f"model '{model}', which is already set to "
                             f"'{policy['decoupled']}'.")
        policy["decoupled"] = decoupled


def _tensor_config(model_config: Dict[str, Any], kind: str, name: str) -> Optional[Dict[str, Any]]:
    tensors: List[Dict[str, Any]] = model_config.get(kind, [])
    for tensor in tensors:
        if tensor["name"] == name:
            return tensor
    return None


def get_input_config_by_name(model_config: Dict[str, Any], name: str) -> Optional[Dict[str, Any]]:
    """The config of input `name` in a parsed model config, None if there is none."""
    return _tensor_config(model_config, "input", name)


def get_output_config_by_name(model_config: Dict[str, Any],
                              name: str) -> Optional[Dict[str, Any]]:
    """The config of output `name` in a parsed model config, None if there is none."""
    return _tensor_config(model_config, "output", name)


def using_decoupled_model_transaction_policy(model_config: Dict[str, Any]) -> bool:
    """Whether a parsed model config makes the model decoupled."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))
