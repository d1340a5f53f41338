"""The ceiling under a row of make bench-triton: the model's own execute(), no server.

    bare_execute.py MODEL_DIR BATCH

Imports MODEL_DIR/1/model.py as a Python-backend stub does, with chorus.triton's
`triton_python_backend_utils` (pure Python here: nothing of a server is used), calls
initialize() with Triton's args (the folder's config.pbtxt as JSON, read through
tritonclient's ModelConfig), builds one request of INPUT0 (zeros of the config's dims,
BATCH items when the model batches), warms up, prints "ready" and then, for each line
"WINDOW_S" read from stdin, calls execute([request]) back to back for that long and
prints "ITEMS SECONDS" (items: calls times BATCH).

Both servers run this same execute() for every request, and the responses it returns
still have to be sent: N of these processes at once are what N instances could serve if
handling a request cost nothing (the driver, triton_measure.run_ceilings, sums their rates), and
one call's time is what a request costs above the transport's floor at the least.
"""

import importlib.util
import os
import sys
import time

import numpy as np
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
sys.path.append(os.path.join(ROOT, "python"))  # PYTHONPATH (the build's copy) first

from chorus.triton import utils as pb_utils  # noqa: E402

VERSION = "1"


def read_config(model_dir):
    with open(os.path.join(model_dir, "config.pbtxt")) as f:
        return text_format.Parse(f.read(), model_config_pb2.ModelConfig())


def load_model(model_dir, config):
    """TritonPythonModel of MODEL_DIR/1/model.py, initialized as Triton initializes it."""
    sys.modules["triton_python_backend_utils"] = pb_utils
    spec = importlib.util.spec_from_file_location(
        "model", os.path.join(model_dir, VERSION, "model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    if hasattr(model, "initialize"):
        model.initialize({
            "model_config": json_format.MessageToJson(config, preserving_proto_field_name=True),
            "model_instance_kind": "CPU", "model_instance_name": f"{config.name}_0",
            "model_instance_device_id": "0", "model_repository": model_dir,
            "model_version": VERSION, "model_name": config.name})
    return model


def request_of(config, batch):
    spec = config.input[0]
    shape = ([batch] if config.max_batch_size > 0 else []) + list(spec.dims)
    assert spec.data_type == model_config_pb2.TYPE_FP32, "the rows' inputs are FP32"
    return pb_utils.InferenceRequest(
        model_name=config.name, requested_output_names=[config.output[0].name],
        inputs=[pb_utils.Tensor(spec.name, np.zeros(shape, dtype=np.float32))])


def main():
    model_dir, batch = os.path.abspath(sys.argv[1]), int(sys.argv[2])
    config = read_config(model_dir)
    model = load_model(model_dir, config)
    request = request_of(config, batch)
    for _ in range(10):
        responses = model.execute([request])
    if len(responses) != 1 or responses[0].has_error():
        sys.exit(f"bare_execute.py: {config.name}'s execute() did not answer its request")
    print("ready", flush=True)
    for line in sys.stdin:
        window_s = float(line)
        calls, began = 0, time.perf_counter()
        while time.perf_counter() - began < window_s:
            model.execute([request])
            calls += 1
        print(calls * batch, time.perf_counter() - began, flush=True)


if __name__ == "__main__":
    main()
