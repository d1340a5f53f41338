"""What a request to a Triton Python-backend model carries and what its response does, on
chorus-server through Triton's clients (HTTP and gRPC): inputs (optional ones absent,
reshape), parameters, request ids, sequence ids and flags, timeouts, requested outputs and
their default, outputs as returned (dtype, names outside the config dropped), response
parameters, and tensors: BYTES (non-UTF-8 too), BF16 through DLPack, torch through DLPack,
as_numpy() without a copy, every fixed-size type, non-contiguous outputs. (sequence_batching
is refused for Python models: the sequence ids and flags reach them as request parameters.)"""

import json

import ml_dtypes
import numpy as np
import pytest

from triton_models import (TritonServer, bytes_array, error_of, grpcclient, httpclient,
                           write_model)

# Reports what a request carries (INFO, JSON); answers IN as int64 (the config says INT32),
# OUT2, and EXTRA (not in the config), with response parameters.
REQUEST_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            seen = {"inputs": {t.name(): t.shape() for t in request.inputs()},
                    "parameters": request.parameters(), "request_id": request.request_id(),
                    "correlation_id": request.correlation_id(), "flags": request.flags(),
                    "requested": sorted(request.requested_output_names()),
                    "timeout": request.timeout(), "cancelled": request.is_cancelled()}
            opt = pb_utils.get_input_tensor_by_name(request, "OPT")
            if opt is not None:
                seen["opt"] = opt.as_numpy().tolist()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", values.astype(np.int64)),
                pb_utils.Tensor("OUT2", np.array([len(values)], dtype=np.int32)),
                pb_utils.Tensor("EXTRA", np.array([1], dtype=np.int32)),
                pb_utils.Tensor("INFO", np.array([json.dumps(seen).encode()], dtype=np.object_))],
                parameters={"p_bool": True, "p_int": 7, "p_str": "text"}))
        return responses
"""

REQUEST_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "OPT" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape { shape: [ 4 ] }
          optional: true } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] },
         { name: "OUT2" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# Tensors: BYTES reversed element by element; BF16 doubled through DLPack and torch; FP32
# tripled through torch, with what as_numpy() and DLPack gave (INFO).
TENSORS_PY = """
import json
import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            reversed_text = np.array([bytes(e[::-1]) for e in text.ravel()],
                                     dtype=np.object_).reshape(text.shape)
            half = pb_utils.get_input_tensor_by_name(request, "HALF")
            try:
                half.as_numpy()
                bf16_numpy = "no error"
            except pb_utils.TritonModelException as e:
                bf16_numpy = str(e)
            doubled = torch.from_dlpack(half.to_dlpack()) * 2
            value = pb_utils.get_input_tensor_by_name(request, "VALUE")
            array = value.as_numpy()
            info = {"text_types": sorted({type(e).__name__ for e in text.ravel()}),
                    "text_dtype": str(text.dtype), "bf16_numpy": bf16_numpy,
                    "half_dtype": str(doubled.dtype), "same_array": value.as_numpy() is array,
                    "owndata": bool(array.flags.owndata),
                    "shares_dlpack": bool(np.shares_memory(array,
                                                           torch.from_dlpack(value).numpy()))}
            tripled = torch.from_numpy(array.copy()) * 3
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("TEXT_OUT", reversed_text),
                pb_utils.Tensor("FIXED", np.array([b"ab", b"c"], dtype=np.bytes_)),
                pb_utils.Tensor("STRS", np.array(["caf\\u00e9", "x"], dtype=np.object_)),
                pb_utils.Tensor("EMPTY", np.array([], dtype=np.object_)),
                pb_utils.Tensor.from_dlpack("HALF_OUT", doubled),
                pb_utils.Tensor.from_dlpack("VALUE_OUT", torch.utils.dlpack.to_dlpack(tripled)),
                pb_utils.Tensor("INFO", np.array([json.dumps(info).encode()], dtype=np.object_))]))
        return responses
"""

TENSORS_CONFIG = """
backend: "python"
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] },
        { name: "HALF" data_type: TYPE_BF16 dims: [ -1 ] },
        { name: "VALUE" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "TEXT_OUT" data_type: TYPE_STRING dims: [ -1 ] },
         { name: "FIXED" data_type: TYPE_STRING dims: [ -1 ] },
         { name: "STRS" data_type: TYPE_STRING dims: [ -1 ] },
         { name: "EMPTY" data_type: TYPE_STRING dims: [ -1 ] },
         { name: "HALF_OUT" data_type: TYPE_BF16 dims: [ -1 ] },
         { name: "VALUE_OUT" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# Echoes each input of every fixed-size type as <name>_OUT, and GRID: a transposed (not
# C-contiguous) array.
TYPES = {"B": ("TYPE_BOOL", np.bool_), "U8": ("TYPE_UINT8", np.uint8),
         "I16": ("TYPE_INT16", np.int16), "U64": ("TYPE_UINT64", np.uint64),
         "F16": ("TYPE_FP16", np.float16), "F64": ("TYPE_FP64", np.float64)}

ECHO_TYPES_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        grid = np.arange(6, dtype=np.float32).reshape(3, 2).T
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor(t.name() + "_OUT", t.as_numpy()) for t in r.inputs()]
            + [pb_utils.Tensor("GRID", grid)]) for r in requests]
"""

ECHO_TYPES_CONFIG = 'backend: "python"\n' + "".join(
    f'input [ {{ name: "{name}" data_type: {kind} dims: [ -1 ] }} ]\n'
    f'output [ {{ name: "{name}_OUT" data_type: {kind} dims: [ -1 ] }} ]\n'
    for name, (kind, _) in TYPES.items()) + \
    'output [ { name: "GRID" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]\n'

# chorus' sequence batcher does not take Python-backend models yet (docs/triton.md).
SEQUENCE_CONFIG = REQUEST_CONFIG + """
sequence_batching { max_sequence_idle_microseconds: 60000000 }
"""


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    repo = tmp_path_factory.mktemp("triton_requests") / "repository"
    write_model(repo, "request_probe", REQUEST_CONFIG, REQUEST_PY)
    write_model(repo, "tensors", TENSORS_CONFIG, TENSORS_PY)
    write_model(repo, "echo_types", ECHO_TYPES_CONFIG, ECHO_TYPES_PY)
    write_model(repo, "sequence", SEQUENCE_CONFIG, REQUEST_PY)
    server = TritonServer(repo)
    yield server
    assert server.stop() == 0


PROTOCOLS = ["http", "grpc"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_carries_what_the_client_sent(triton, protocol):
    values = {"IN": np.array([3, 4, 5], np.int32),
              "OPT": np.arange(4, dtype=np.float32).reshape(2, 2)}
    result = triton.infer(protocol, "request_probe", values, request_id="req-7",
                          parameters={"p1": "x", "p2": 3, "p3": True}, sequence_id=42,
                          sequence_start=True, sequence_end=True, timeout=11000000)
    seen = json.loads(result.as_numpy("INFO")[0])
    assert seen["inputs"] == {"IN": [3], "OPT": [4]}  # OPT reshaped as the config says
    assert seen["opt"] == [0.0, 1.0, 2.0, 3.0]
    assert seen["parameters"] == '{"p1":"x","p2":3,"p3":true}'  # JSON text, as Triton's
    assert seen["request_id"] == "req-7"
    assert seen["correlation_id"] == 42
    assert seen["flags"] == 3  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_START | _END
    assert seen["timeout"] == 11000000
    assert seen["requested"] == ["INFO", "OUT", "OUT2"]  # all config outputs by default
    assert seen["cancelled"] is False
    response = result.get_response()
    if protocol == "http":
        assert response["id"] == "req-7"
    else:
        assert response.id == "req-7"
        parameters = response.parameters
        assert (parameters["p_bool"].bool_param, parameters["p_int"].int64_param,
                parameters["p_str"].string_param) == (True, 7, "text")
    # Outputs as returned (int64 for the INT32 OUT); EXTRA, not in the config, dropped.
    names = [o["name"] for o in response["outputs"]] if protocol == "http" else \
        [o.name for o in response.outputs]
    assert sorted(names) == ["INFO", "OUT", "OUT2"]
    assert result.as_numpy("OUT").dtype == np.int64
    assert result.as_numpy("OUT").tolist() == [3, 4, 5]


def test_response_parameters_reach_an_http_client(triton):
    result = triton.infer("http", "request_probe", {"IN": np.array([1], np.int32)})
    assert result.get_response()["parameters"] == {"p_bool": True, "p_int": 7, "p_str": "text"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_absent_optional_input_and_the_defaults_of_a_bare_request(triton, protocol):
    result = triton.infer(protocol, "request_probe", {"IN": np.array([1], np.int32)})
    seen = json.loads(result.as_numpy("INFO")[0])
    assert seen["inputs"] == {"IN": [1]} and "opt" not in seen
    assert (seen["request_id"], seen["correlation_id"], seen["flags"]) == ("", 0, 0)
    assert (json.loads(seen["parameters"]), seen["timeout"]) == ({}, 0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_requested_outputs_prune_the_response(triton, protocol):
    result = triton.infer(protocol, "request_probe", {"IN": np.array([1, 2], np.int32)},
                          outputs=["OUT2", "INFO"])
    seen = json.loads(result.as_numpy("INFO")[0])
    assert seen["requested"] == ["INFO", "OUT2"]
    assert result.as_numpy("OUT") is None and result.as_numpy("OUT2").tolist() == [2]


def test_a_string_sequence_id_reaches_the_model(triton):
    result = triton.infer("grpc", "request_probe", {"IN": np.array([1], np.int32)},
                          sequence_id="session-9", sequence_start=True)
    seen = json.loads(result.as_numpy("INFO")[0])
    assert (seen["correlation_id"], seen["flags"]) == ("session-9", 1)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bytes_bf16_and_dlpack_tensors(triton, protocol):
    text = bytes_array(b"abc", b"\xff\xfe\x00raw", b"")
    half = np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16)
    value = np.array([1.0, 2.0], np.float32)
    module = httpclient if protocol == "http" else grpcclient
    client = triton.http if protocol == "http" else triton.grpc
    inputs = [module.InferInput("TEXT", [3], "BYTES"), module.InferInput("HALF", [3], "BF16"),
              module.InferInput("VALUE", [2], "FP32")]
    for tensor, array in zip(inputs, (text, half, value)):
        tensor.set_data_from_numpy(array)
    result = client.infer("tensors", inputs)
    assert result.as_numpy("TEXT_OUT").tolist() == [b"cba", b"war\x00\xfe\xff", b""]
    # np.bytes_ arrays and str elements are BYTES too; an empty one has shape [0].
    assert result.as_numpy("FIXED").tolist() == [b"ab", b"c"]
    assert result.as_numpy("STRS").tolist() == ["caf\u00e9".encode(), b"x"]
    assert result.as_numpy("EMPTY").shape == (0,)
    assert result.as_numpy("HALF_OUT").astype(np.float32).tolist() == [3.0, -4.0, 6.5]
    assert result.as_numpy("VALUE_OUT").tolist() == [3.0, 6.0]
    info = json.loads(result.as_numpy("INFO")[0])
    assert info["text_types"] == ["bytes"] and info["text_dtype"] == "object"
    assert "BF16" in info["bf16_numpy"] and info["half_dtype"] == "torch.bfloat16"
    # as_numpy() is one array, a view of the request's own buffer that DLPack shares too.
    assert info["same_array"] and not info["owndata"] and info["shares_dlpack"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_asking_for_an_output_the_config_lacks_is_refused(triton, protocol):
    error = error_of(lambda: triton.infer(protocol, "request_probe",
                                          {"IN": np.array([1], np.int32)}, outputs=["EXTRA"]))
    assert "unexpected inference output 'EXTRA' for model 'request_probe'" in error.message()
    assert error.status() == ("400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_fixed_size_type_and_a_non_contiguous_output(triton, protocol):
    rng = np.random.default_rng(11)
    values = {name: (rng.integers(0, 2, 5).astype(dtype) if dtype == np.bool_
                     else (rng.standard_normal(5) * 50).astype(dtype))
              for name, (_, dtype) in TYPES.items()}
    result = triton.infer(protocol, "echo_types", values)
    for name, array in values.items():
        echoed = result.as_numpy(f"{name}_OUT")
        assert echoed.dtype == array.dtype and echoed.tolist() == array.tolist()
    assert result.as_numpy("GRID").tolist() == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]


def test_sequence_batching_of_a_python_model_is_refused_naming_the_field(triton):
    entry = triton.index()["sequence"]
    assert entry["state"] == "UNAVAILABLE" and "sequence_batching" in entry["reason"]
