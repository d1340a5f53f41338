"""TorchServe model archives the tests make with torch-model-archiver (pip), as a
TorchServe user makes them: handler files, an eager model with its state dict, a
model-config.yaml."""

import os
import subprocess
import sys
import textwrap
import uuid

import torch

ARCHIVER = os.path.join(os.path.dirname(sys.executable), "torch-model-archiver")

# A handler module with a `handle` function: echoes each request's inputs (decoded as
# TorchServe decodes them) with the batch's size and the worker's pid, and sets what a
# request's headers ask for: a status ("x-status"), a header ("x-echo"), failures.
ECHO_HANDLER = '''
import os
from ts.utils.util import PredictionException


def describe(value):
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": len(value), "type": type(value).__name__}
    return value


def handle(data, context):
    if data is None:
        return None
    answers = []
    for index, row in enumerate(data):
        asked = context.get_request_header(index, "x-fail")
        if asked == "prediction":
            raise PredictionException("the handler refused", 422)
        if asked == "error":
            raise RuntimeError("a bug in the handler")
        status = context.get_request_header(index, "x-status")
        if status:
            context.set_response_status(int(status), "Made up", index)
        echo = context.get_request_header(index, "x-echo")
        if echo:
            context.set_response_header(index, "x-echoed", echo)
        context.set_response_content_type(index, "application/json")
        answers.append({
            "inputs": {name: describe(value) for name, value in sorted(row.items())},
            "batch": len(data),
            "pid": os.getpid(),
            "explain": context.get_request_header(index, "explain"),
            "cwd_has_handler": os.path.isfile("echo_handler.py"),
            "worker": id(context),
        })
    return answers
'''

# An eager model (model.py) and a BaseHandler subclass that reads a JSON list of
# floats and answers the net's output as a list.
NET_MODEL = '''
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.tanh(self.fc(x))
'''

NET_HANDLER = '''
import torch
from ts.torch_handler.base_handler import BaseHandler


class NetHandler(BaseHandler):
    def preprocess(self, data):
        return torch.tensor([row.get("data") or row.get("body") for row in data],
                            dtype=torch.float32)

    def postprocess(self, data):
        return data.tolist()
'''


def net_state_dict(seed=7):
    torch.manual_seed(seed)
    net = torch.nn.Linear(4, 3)
    return {"fc.weight": net.weight.detach().clone(), "fc.bias": net.bias.detach().clone()}


def net_forward(state, rows):
    x = torch.tensor(rows, dtype=torch.float32)
    return torch.tanh(x @ state["fc.weight"].T + state["fc.bias"]).tolist()


def archive(store, name, sources, handler, version="1.0", serialized=None, model_file=None,
            config=None, extra=(), extra_requirements=None):
    """Writes `sources` (file name -> text) into a folder beside `store`, and archives them
    as `<store>/<name>.mar`. Returns the archive's path."""
    work = os.path.join(os.path.dirname(store), f"{name}-sources")
    os.makedirs(work, exist_ok=True)
    for file_name, text in sources.items():
        path = os.path.join(work, file_name)
        if isinstance(text, dict):
            torch.save(text, path)
        else:
            with open(path, "w") as f:
                f.write(textwrap.dedent(text))
    command = [ARCHIVER, "--model-name", name, "--version", version,
               "--handler", os.path.join(work, handler), "--export-path", store, "-f"]
    if serialized:
        command += ["--serialized-file", os.path.join(work, serialized)]
    if model_file:
        command += ["--model-file", os.path.join(work, model_file)]
    if config:
        command += ["--config-file", os.path.join(work, config)]
    if extra:
        command += ["--extra-files", ",".join(os.path.join(work, e) for e in extra)]
    if extra_requirements:
        command += ["--requirements-file", os.path.join(work, extra_requirements)]
    os.makedirs(store, exist_ok=True)
    subprocess.run(command, check=True, capture_output=True)
    return os.path.join(store, f"{name}.mar")


def echo_archive(store, name="echo", config=None):
    sources = {"echo_handler.py": ECHO_HANDLER}
    if config:
        sources["model-config.yaml"] = config
    return archive(store, name, sources, "echo_handler.py",
                   config="model-config.yaml" if config else None)


def net_archive(store, name="net", seed=7):
    sources = {"model.py": NET_MODEL, "net_handler.py": NET_HANDLER,
               "net.pt": net_state_dict(seed)}
    return archive(store, name, sources, "net_handler.py", serialized="net.pt",
                   model_file="model.py")


# A stateful handler (TorchServe's sequence batching): each worker keeps a running sum
# per sequence id in its own dict, as the stateful example keeps an LRU cache; answers
# the sum with the sequence's id, whether the request started it, and the worker. A
# request whose body is "wait:PATH" writes PATH.started and waits (at most 5 minutes)
# for PATH to exist.
STATEFUL_HANDLER = '''
import os
import time


class Sums:
    def __init__(self):
        self.sums = {}

    def initialize(self, context):
        self.context = context

    def handle(self, data, context):
        answers = []
        for index, row in enumerate(data):
            sequence = context.get_sequence_id(index)
            text = (row.get("data") or row.get("body")).decode()
            if text.startswith("wait:"):
                path = text[len("wait:"):]
                open(path + ".started", "w").close()
                deadline = time.monotonic() + 300
                while not os.path.exists(path) and time.monotonic() < deadline:
                    time.sleep(0.01)
                text = "0"
            self.sums[sequence] = self.sums.get(sequence, 0) + int(text)
            answers.append({
                "sequence": sequence,
                "sum": self.sums[sequence],
                "start": context.get_request_header(index, "ts_request_sequence_start"),
                "worker": id(self),
                "batch": len(data),
            })
        return answers


_service = Sums()


def handle(data, context):
    if not hasattr(_service, "context"):
        _service.initialize(context)
    return None if data is None else _service.handle(data, context)
'''


def stateful_archive(store, name="stateful", config=None):
    """An archive of STATEFUL_HANDLER with `config` as its model-config.yaml."""
    sources = {"stateful_handler.py": STATEFUL_HANDLER, "model-config.yaml": config}
    return archive(store, name, sources, "stateful_handler.py", config="model-config.yaml")


def multipart(fields):
    """A multipart/form-data body of `fields` (name -> (file name or None, bytes, type))."""
    boundary = uuid.uuid4().hex
    parts = []
    for name, (file_name, data, content_type) in fields.items():
        disposition = f'form-data; name="{name}"'
        if file_name:
            disposition += f'; filename="{file_name}"'
        head = f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
        if content_type:
            head += f"Content-Type: {content_type}\r\n"
        parts.append(head.encode() + b"\r\n" + data + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}
