"""TorchServe's side of the peer benchmark: a custom handler (function entry point).

It serves the very archive chorus serves (a chorus package is a stock
torch.package archive plus a manifest): the same model object, weights and
input signature, loaded with stock torch.package, as a TorchServe user would
load a pickled model (one copy of the weights per worker process).

Requests carry what perf_analyzer's TorchServe client sends: the raw bytes of
one file, POSTed as multipart/form-data in a part named "data" (no file name, no
content type, so TorchServe hands the bytes over as they are). Here those bytes
are the input tensor's raw contents (C order, the manifest's dtype and shape),
exactly what chorus receives in `raw_input_contents` over gRPC. A plain POST
body (the "body" key) is accepted too. The answer is the output tensor's raw
bytes, as chorus' raw output. No other pre- or post-processing on either side.

Intra-op threads: CHORUS_PEERS_INTRA_OP_THREADS (set by the driver to what
chorus-server uses: the cores over the worker count, at least 1); inference
mode, as chorus runs its models.
"""

import json
import os

import torch

# chorus' archive layout (python/chorus/package/_format.py, generated from
# package/include/chorus/package/format.h); the workers do not import chorus.
_MANIFEST_RECORD = ".data/chorus/manifest.json"
_MODEL_PACKAGE, _MODEL_RESOURCE = "chorus_model", "model.pkl"

_state = {}


def load(archive):
    """The archive's model (eval mode) and its input's shape and dtype, loaded
    with stock torch.package; intra-op threads set first. Also what
    bare_loop.py runs."""
    threads = int(os.environ.get("CHORUS_PEERS_INTRA_OP_THREADS", "0"))
    if threads > 0:
        torch.set_num_threads(threads)
    from torch.package import PackageImporter
    importer = PackageImporter(archive)
    manifest = json.loads(importer.zip_reader.get_record(_MANIFEST_RECORD))
    (spec,) = manifest["inputs"]
    model = importer.load_pickle(_MODEL_PACKAGE, _MODEL_RESOURCE)
    model.eval()
    return model, [int(d) for d in spec["shape"]], getattr(torch, spec["dtype"])


def _initialize(context):
    model_dir = context.system_properties["model_dir"]
    model, shape, dtype = load(
        os.path.join(model_dir, context.manifest["model"]["serializedFile"]))
    _state.update(model=model, shape=shape, dtype=dtype)


def _tensor(request, shape, dtype):
    raw = request.get("data")
    if raw is None:
        raw = request.get("body")
    return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)


def handle(data, context):
    if data is None:  # TorchServe's initialization call
        _initialize(context)
        return None
    model, shape, dtype = _state["model"], _state["shape"], _state["dtype"]
    if shape[0] == -1:
        # A batchable model (its first dimension any size): the requests TorchServe
        # batched run as one call, as chorus' dynamic batching runs them.
        xs = [_tensor(request, shape, dtype) for request in data]
        with torch.inference_mode():
            y = model(torch.cat(xs))
        rows = torch.split(y, [len(x) for x in xs])
        return [row.contiguous().numpy().tobytes() for row in rows]
    answers = []
    for request in data:
        with torch.inference_mode():
            y = model(_tensor(request, shape, dtype))
        answers.append(y.contiguous().numpy().tobytes())
    return answers
