"""torch.export programs (torch.export.save's .pt2 files) served from the host's archive.

Each interpreter loads the program with torch and runs its module(); the weights torch
wrote as raw bytes are then swapped for views of the host's mapping of the file, so every
interpreter's weights are the same memory, as with a chorus package. The signature is read
from the program: its inputs' names, the dtypes and shapes torch.export traced (a dynamic
size is -1), and batching when the first dimension of every input and output is dynamic.
"""

import json
import math

import torch

from chorus.package import _format as fmt

# A dynamic batch dimension bounded above this is served with the server's default.
_LARGEST_ANNOUNCED_BATCH = 1 << 16


class ExportError(ValueError):
    """The program cannot be served as it is; the message says why."""


def load_program(archive):
    """The program of `archive` (a torch.classes.chorus.Archive) as a module in eval mode,
    with its signature (manifest JSON form) as the attribute ``chorus_signature``."""
    program = torch.export.load(archive.path())
    signature = json.dumps(program_signature(program))
    module = program.module()
    _share_weights(archive, module)
    del program
    module.chorus_signature = signature
    return module


def program_signature(program):
    """{"inputs", "outputs", "batching"} of an ExportedProgram."""
    nodes = {node.name: node for node in program.graph.nodes}
    user_inputs = list(program.graph_signature.user_inputs)
    inputs = [_spec(name, nodes[name].meta.get("val"), f"input {name}") for name in user_inputs]
    output_node = next(node for node in program.graph.nodes if node.op == "output")
    values = output_node.args[0]
    values = values if isinstance(values, (tuple, list)) else [values]
    user_outputs = values[len(values) - len(program.graph_signature.user_outputs):]
    outputs = [
        _spec("output" if len(user_outputs) == 1 else f"output{i}",
              getattr(node, "meta", {}).get("val"), f"output {i}")
        for i, node in enumerate(user_outputs)]
    return {"inputs": inputs, "outputs": outputs, "batching": _batching(program, inputs, outputs,
                                                                      nodes, user_inputs)}


def _spec(name, value, what):
    if not isinstance(value, torch.Tensor):
        raise ExportError(f"{what} is a {type(value).__name__}, not a tensor: chorus serves "
                          "programs whose inputs and outputs are tensors")
    shape = [size if isinstance(size, int) else -1 for size in value.shape]
    return {"name": name, "dtype": str(value.dtype).removeprefix("torch."), "shape": shape}


def _batching(program, inputs, outputs, nodes, user_inputs):
    """Batchable along dimension 0 when it is dynamic in every input and output; the
    largest batch is the range torch.export was given for it (0 when unbounded)."""
    specs = inputs + outputs
    if not all(spec["shape"] and spec["shape"][0] == -1 for spec in specs):
        return {"batchable": False, "batch_dim": 0, "max_batch_size": 0}
    largest = 0
    first = nodes[user_inputs[0]].meta["val"].shape[0]
    for symbol, bounds in program.range_constraints.items():
        if str(symbol) == str(first):
            upper = bounds.upper
            if upper != math.inf and int(upper) <= _LARGEST_ANNOUNCED_BATCH:
                largest = int(upper)
    return {"batchable": True, "batch_dim": 0, "max_batch_size": largest}


def _share_weights(archive, module):
    """Swaps the weights torch read from the file for views of the host's mapping of it."""
    if not archive.has(fmt.EXPORT_WEIGHTS_CONFIG_RECORD):
        return
    config = json.loads(bytes(archive.record(fmt.EXPORT_WEIGHTS_CONFIG_RECORD).numpy()))
    tensors = dict(module.named_parameters(remove_duplicate=False))
    tensors.update(module.named_buffers(remove_duplicate=False))
    for name, entry in config.get("config", {}).items():
        tensor = tensors.get(name)
        record = fmt.EXPORT_WEIGHTS_DIRECTORY + entry.get("path_name", "")
        if entry.get("use_pickle", True) or tensor is None or not archive.has(record):
            continue  # torch pickled it, or it is not a plain weight: keep torch's copy
        mapped = archive.record(record)  # a view of the mapping: the record is stored
        if mapped.numel() != tensor.untyped_storage().nbytes():
            continue
        shared = torch.empty(0, dtype=tensor.dtype).set_(
            mapped.untyped_storage(), tensor.storage_offset(), tensor.size(), tensor.stride())
        with torch.no_grad():
            tensor.data = shared
