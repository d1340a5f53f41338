"""The entry points chorus' C++ side (server/torchserve) calls to run TorchServe models.

Each call comes on a thread holding the GIL of the interpreter concerned and takes and
returns plain values; an exception goes back to C++, which logs it and fails the load or
the batch with its message.

    worker_settings(model_dir, config_file) -> {name: int}
    check_requirements(model_dir, requirements_file)
    create_worker(worker_key, model_name, model_dir, module, function, gpu_id, batch_size,
                  envelope)
    predict(worker_key, requests) -> [(status, phrase, headers, body, error)]
    close_worker(worker_key)

`worker_key` names one worker of one load of a model in the process. Text that may not be
UTF-8 (header values, inputs, bodies) crosses as uint8 tensors in the raw layout of a BYTES
tensor (each element a 4-byte little-endian length and its bytes): a request's `headers`
are name, value, name, value...; its `inputs` are name, content type, data for each input;
an answer's `headers` are what the handler set (its content type as "content-type").
An answer's `error` is "" for a response; otherwise the batch failed with HTTP status
`status` and that message (TorchServe's frontend writes its error JSON around it).
"""

import os
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .worker import Failure, Input, Request, Worker

__all__ = ["worker_settings", "check_requirements", "create_worker", "predict",
           "close_worker"]

_workers: Dict[str, Worker] = {}

# model-config.yaml's keys for the frontend (TorchServe's ModelConfig.java): what chorus
# maps onto its instances and batching; the handler gets the whole file as
# context.model_yaml_config.
_SETTINGS = ("minWorkers", "maxWorkers", "batchSize", "maxBatchDelay", "responseTimeout",
             "sequenceMaxIdleMSec", "maxNumSequence", "maxSequenceJobQueueSize")
_FLAGS = ("sequenceBatching",)  # booleans, answered as 0 or 1


def worker_settings(model_dir: str, config_file: str) -> Dict[str, int]:
    """The integer settings of the archive's model-config.yaml that chorus maps, its
    true/false ones as 1 or 0 (absent keys are left out). Raises ValueError naming a key
    whose value is not of its kind."""
    if not config_file:
        return {}
    import yaml

    with open(os.path.join(model_dir, config_file), encoding="utf-8") as file:
        config = yaml.safe_load(file) or {}
    if not isinstance(config, dict):
        raise ValueError(f"{config_file}: not a mapping")
    settings = {}
    for key in _SETTINGS:
        if key not in config:
            continue
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{config_file}: {key}: {value!r} is not an integer")
        settings[key] = value
    for key in _FLAGS:
        if key not in config:
            continue
        if not isinstance(config[key], bool):
            raise ValueError(f"{config_file}: {key}: {config[key]!r} is not true or false")
        settings[key] = int(config[key])
    return settings


def check_requirements(model_dir: str, requirements_file: str) -> None:
    """Raises ValueError naming what the archive's requirements.txt asks for that the
    interpreters' site-packages lack (chorus' interpreters share them: nothing is installed
    per model, where TorchServe's install_py_dep_per_model would pip-install the file)."""
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement

    path = os.path.join(model_dir, requirements_file)
    missing = []
    with open(path, encoding="utf-8") as file:
        for line in file:
            text = line.split("#", 1)[0].strip()
            if not text or text.startswith("-"):
                continue  # pip's options (--extra-index-url, -r, -e): nothing to check
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                missing.append(f"{text} (not a requirement chorus can check)")
                continue
            if requirement.marker is not None and not requirement.marker.evaluate():
                continue
            try:
                installed = metadata.version(requirement.name)
            except metadata.PackageNotFoundError:
                missing.append(f"{text} (not installed)")
                continue
            if not requirement.specifier.contains(installed, prereleases=True):
                missing.append(f"{text} ({installed} is installed)")
    if missing:
        raise ValueError(f"{requirements_file} asks for what chorus' interpreters lack: "
                         f"{', '.join(missing)}; install it into the venv chorus embeds "
                         f"(models share its site-packages)")


def create_worker(worker_key: str, model_name: str, model_dir: str, module: str,
                  function: str, gpu_id: int, batch_size: int, envelope: str) -> None:
    """Loads the handler and runs its initialize for a new worker."""
    if worker_key in _workers:
        raise ValueError(f"worker {worker_key} exists")
    _workers[worker_key] = Worker(worker_key, model_name, model_dir, module, function,
                                  gpu_id=None if gpu_id < 0 else gpu_id, batch_size=batch_size,
                                  envelope=envelope or None)


def predict(worker_key: str, requests: Sequence[Tuple[str, Any, Any]]) -> List[Tuple]:
    """One batch through the worker: an answer per request, in order."""
    batch = []
    for request_id, headers, inputs in requests:
        header_items = _strings(headers)
        input_items = _strings(inputs)
        batch.append(Request(
            request_id=request_id,
            headers={_text(header_items[i]): _text(header_items[i + 1])
                     for i in range(0, len(header_items) - 1, 2)},
            inputs=[Input(name=_text(input_items[i]), content_type=_text(input_items[i + 1]),
                          data=input_items[i + 2]) for i in range(0, len(input_items) - 2, 3)]))
    answers = _workers[worker_key].predict(batch)
    if isinstance(answers, Failure):
        failed = (answers.code, "", _raw([]), _raw([]), answers.message or "")
        return [failed] * len(batch)
    return [(answer.status, answer.phrase,
             _raw([item.encode("latin-1", "replace") for header in answer.headers.items()
                   for item in (str(header[0]), str(header[1]))]),
             _raw([answer.body]), "") for answer in answers]


def close_worker(worker_key: str) -> None:
    """Forgets the worker (its modules); a worker never made is no error."""
    worker: Optional[Worker] = _workers.pop(worker_key, None)
    if worker is not None:
        worker.close()


def _text(data: bytes) -> str:
    # HTTP/1.1's header bytes are ISO-8859-1 (RFC 9110); UTF-8 is tried first, as
    # TorchServe's frontend (Netty) hands the worker UTF-8.
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _strings(raw: Any) -> List[bytes]:
    """The elements of a BYTES tensor's raw layout (a uint8 tensor)."""
    data = raw.numpy().tobytes()
    items, offset = [], 0
    while offset < len(data):
        (length,) = struct.unpack_from("<I", data, offset)
        offset += 4
        items.append(data[offset:offset + length])
        offset += length
    return items


def _raw(items: List[bytes]) -> Any:
    """`items` in a BYTES tensor's raw layout, as a uint8 tensor."""
    import torch

    data = b"".join(struct.pack("<I", len(item)) + item for item in items)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else \
        torch.empty(0, dtype=torch.uint8)
