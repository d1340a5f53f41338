"""chorus.triton (Triton's Python backend) in plain Python: everything but what needs a
request handle or the server's native pieces, which the server-level tests cover."""

import asyncio
import json
import os
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.utils.dlpack

from chorus.triton import backend, bls
from chorus.triton import utils as pb_utils
from chorus.triton.datatypes import TYPE_BF16, TYPE_BYTES
from chorus.triton.errors import ErrorCode, error_code_of_status
from chorus.triton.execution import BackendError, checked_return, failure_message
from chorus.triton.metrics import MetricKind, checked_buckets, checked_labels, operation_error
from chorus.model_namespaces import ROOT, ModelNamespace
from chorus.triton.tensor import Tensor, call_input_form, tensor_of_call_output, wire_form

TritonModelException = pb_utils.TritonModelException


# Tensors.

def test_tensor_wraps_a_contiguous_array_and_returns_it_each_time():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor("x", array)
    assert (tensor.name(), tensor.shape(), tensor.triton_dtype()) == ("x", [2, 3], 11)
    assert tensor.as_numpy() is array and tensor.as_numpy() is tensor.as_numpy()
    assert tensor.is_cpu()
    transposed = pb_utils.Tensor("x", array.T)  # made contiguous, as Triton does
    assert transposed.as_numpy().flags.c_contiguous and transposed.shape() == [3, 2]
    np.testing.assert_array_equal(transposed.as_numpy(), array.T)


@pytest.mark.parametrize("name, array, error, text", [
    (None, np.zeros(1), TypeError, ""),
    ("x", None, TypeError, ""),
    ("", None, TypeError, ""),
    ("x", [1, 2], TypeError, ""),
    ("", np.zeros(1), TritonModelException, "Tensor name cannot be an empty string."),
    ("x", np.zeros(1, np.complex64), TritonModelException, "NumPy dtype is not supported."),
    ("x", np.array(["text"]), TritonModelException, "NumPy dtype is not supported."),
])
def test_tensor_refuses_what_triton_refuses(name, array, error, text):
    with pytest.raises(error, match=text):
        pb_utils.Tensor(name, array)


@pytest.mark.parametrize("dtype", [np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8,
                                   np.int16, np.int32, np.int64, np.float16, np.float32,
                                   np.float64])
def test_every_fixed_size_type_goes_to_the_wire_zero_copy(dtype):
    array = np.arange(4).astype(dtype)
    tensor = pb_utils.Tensor("x", array)
    assert tensor.triton_dtype() == pb_utils.numpy_to_triton_type(dtype)
    data, bytes_shape = wire_form(tensor)
    assert bytes_shape is None and data.is_contiguous()
    assert np.shares_memory(data.numpy(), array)


def test_bytes_tensors_are_object_arrays_of_bytes_serialized_on_the_wire():
    array = np.array([[b"a", b""], [b"\xff\x00z", "caf\u00e9"]], dtype=np.object_)
    tensor = pb_utils.Tensor("s", array)
    assert tensor.triton_dtype() == TYPE_BYTES
    data, bytes_shape = wire_form(tensor)
    assert bytes_shape == [2, 2] and data.dtype == torch.uint8
    decoded = pb_utils.deserialize_bytes_tensor(data.numpy())
    assert decoded.tolist() == [b"a", b"", b"\xff\x00z", "caf\u00e9".encode()]
    assert pb_utils.Tensor("s", np.array([b"ab", b"c"])).triton_dtype() == TYPE_BYTES


def test_a_bytes_input_decodes_once_and_echoes_its_serialized_form():
    serialized = torch.tensor(list(pb_utils.serialize_byte_tensor(
        np.array([b"one", b"two", b"", b"four"], dtype=np.object_))), dtype=torch.uint8)
    tensor = Tensor._of_serialized_bytes("s", serialized, [2, 2])
    assert wire_form(tensor) == (serialized, [2, 2])  # untouched: sent back as it came
    assert tensor.as_numpy().tolist() == [[b"one", b"two"], [b"", b"four"]]
    assert tensor.as_numpy() is tensor.as_numpy()
    data, shape = wire_form(tensor)  # decoded: encoded again
    assert shape == [2, 2] and torch.equal(data, serialized) and data is not serialized


def test_an_input_from_torch_is_viewed_without_a_copy():
    data = torch.arange(6, dtype=torch.int64).reshape(3, 2)
    tensor = Tensor._of_torch("x", data)
    assert tensor.triton_dtype() == 9 and tensor.shape() == [3, 2]
    assert np.shares_memory(tensor.as_numpy(), data.numpy())
    assert tensor.as_numpy() is tensor.as_numpy()


def test_dlpack_both_ways_shares_memory():
    array = np.arange(5, dtype=np.float32)
    tensor = pb_utils.Tensor("x", array)
    assert np.shares_memory(torch.utils.dlpack.from_dlpack(tensor.to_dlpack()).numpy(), array)
    assert np.shares_memory(torch.from_dlpack(tensor).numpy(), array)  # __dlpack__
    assert np.shares_memory(np.from_dlpack(tensor), array)
    assert tensor.__dlpack_device__() == (1, 0)
    source = torch.arange(4, dtype=torch.int32)
    for dlpack in (torch.utils.dlpack.to_dlpack(source), source, source.numpy()):
        copy = pb_utils.Tensor.from_dlpack("y", dlpack)
        assert copy.name() == "y" and copy.triton_dtype() == 8
        assert np.shares_memory(copy.as_numpy(), source.numpy())


def test_bf16_crosses_only_through_dlpack():
    source = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    tensor = pb_utils.Tensor.from_dlpack("b", source)
    assert tensor.triton_dtype() == TYPE_BF16
    with pytest.raises(TritonModelException, match="Tensor dtype is BF16 and cannot be "
                       "converted to NumPy. Use to_dlpack\\(\\) and from_dlpack\\(\\) instead."):
        tensor.as_numpy()
    back = torch.utils.dlpack.from_dlpack(tensor.to_dlpack())
    assert back.dtype == torch.bfloat16 and torch.equal(back, source)
    assert wire_form(tensor)[0].dtype == torch.bfloat16
    with pytest.raises(KeyError):  # no numpy type, so no entry, as in Triton
        pb_utils.triton_string_to_numpy("TYPE_BF16")


@pytest.mark.parametrize("name, dlpack, error, text", [
    ("x", None, TritonModelException, "Provided tensor is not supported"),
    ("", None, TritonModelException, "Tensor name cannot be an empty string."),
    (None, torch.zeros(1), TypeError, ""),
    ("x", torch.zeros(2, 3).T, TritonModelException, "DLPack tensor is not contiguous"),
])
def test_from_dlpack_refuses_what_triton_refuses(name, dlpack, error, text):
    with pytest.raises(error, match=text):
        pb_utils.Tensor.from_dlpack(name, dlpack)


def test_a_consumed_capsule_and_bytes_tensors_have_no_dlpack():
    capsule = torch.utils.dlpack.to_dlpack(torch.zeros(2))
    pb_utils.Tensor.from_dlpack("x", capsule)
    with pytest.raises(TritonModelException):
        pb_utils.Tensor.from_dlpack("x", capsule)
    with pytest.raises(TritonModelException, match="DLPack does not have support for string"):
        pb_utils.Tensor("s", np.array([b"a"], dtype=np.object_)).to_dlpack()


def test_bls_tensors_cross_as_torch_tensors_and_nested_bytes():
    assert call_input_form(pb_utils.Tensor("s", np.array([[b"a", "b"]], dtype=np.object_))) == \
        [[b"a", b"b"]]
    assert call_input_form(Tensor._of_torch("x", data := torch.ones(2))) is data
    raw = b"\xff\xfeok".decode("utf-8", "surrogateescape")  # as model calls give BYTES back
    output = tensor_of_call_output("s", [[raw, "x"], ["", "y"]])
    assert output.triton_dtype() == TYPE_BYTES and output.shape() == [2, 2]
    assert output.as_numpy()[0, 0] == b"\xff\xfeok"
    assert tensor_of_call_output("x", data).as_numpy().tolist() == [1.0, 1.0]


# Types and the BYTES codec.

def test_type_tables_are_tritons():
    names = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64"]
    for number, name in enumerate(names, start=1):
        numpy_type = pb_utils.triton_to_numpy_type(number)
        assert pb_utils.numpy_to_triton_type(numpy_type) == number
        expected = bool if name == "BOOL" else numpy_type
        assert pb_utils.triton_string_to_numpy(f"TYPE_{name}") is expected
    assert pb_utils.triton_to_numpy_type(13) is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.triton_to_numpy_type(14) is None
    assert pb_utils.numpy_to_triton_type(np.complex128) is None


def test_byte_tensor_codec():
    array = np.array([b"", b"abc", "\u00e9"], dtype=np.object_)
    serialized = pb_utils.serialize_byte_tensor(array)
    assert serialized == b"\x00\x00\x00\x00\x03\x00\x00\x00abc\x02\x00\x00\x00\xc3\xa9"
    assert pb_utils.deserialize_bytes_tensor(serialized).tolist() == [b"", b"abc", b"\xc3\xa9"]
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == b""
    assert pb_utils.serialize_byte_tensor(np.zeros(2, np.float32)) is None
    for truncated in (b"\x01\x00", b"\x05\x00\x00\x00ab"):
        with pytest.raises(TritonModelException, match="Invalid bytes tensor data"):
            pb_utils.deserialize_bytes_tensor(truncated)


# Errors and responses.

def test_triton_error_codes_and_chorus_statuses():
    assert [c.value for c in ErrorCode] == list(range(8))
    error = pb_utils.TritonError("boom")
    assert (error.message(), error.code()) == ("boom", pb_utils.TritonError.INTERNAL)
    assert pb_utils.TritonError("x", pb_utils.TritonError.CANCELLED).code() == 7
    with pytest.raises(TypeError):
        pb_utils.TritonError(None)
    assert error_code_of_status("INVALID_ARGUMENT") == pb_utils.TritonError.INVALID_ARG
    assert error_code_of_status("UNIMPLEMENTED") == pb_utils.TritonError.UNSUPPORTED
    assert error_code_of_status("something new") == pb_utils.TritonError.UNKNOWN


def test_inference_response_holds_outputs_error_and_parameters():
    output = pb_utils.Tensor("y", np.zeros(1, np.float32))
    response = pb_utils.InferenceResponse([output], parameters={"n": 1, "ok": True, "s": "v"})
    assert response.output_tensors() == [output] and not response.has_error()
    assert json.loads(response.parameters()) == {"n": 1, "ok": True, "s": "v"}
    assert pb_utils.get_output_tensor_by_name(response, "y") is output
    assert pb_utils.get_output_tensor_by_name(response, "z") is None
    empty = pb_utils.InferenceResponse()
    assert (empty.output_tensors(), empty.parameters(), empty.error()) == ([], "{}", None)
    failed = pb_utils.InferenceResponse(error=pb_utils.TritonError("bad"))
    assert failed.has_error() and failed.error().message() == "bad"


@pytest.mark.parametrize("kwargs, error, text", [
    ({"output_tensors": None}, TypeError, ""),
    ({"output_tensors": [None]}, TritonModelException,
     "Output tensor for inference response should not be empty."),
    ({"error": "a string"}, TypeError, ""),
    ({"parameters": [1]}, TritonModelException, "got <class 'list'>"),
    ({"parameters": {"f": 1.5}}, TritonModelException,
     "Expect parameters values to have type bool/int/str, found type <class 'float'>"),
    ({"parameters": {1: "v"}}, TritonModelException,
     "Expect parameters keys to have type str, found type <class 'int'>"),
])
def test_inference_response_refuses_what_triton_refuses(kwargs, error, text):
    with pytest.raises(error, match=text):
        pb_utils.InferenceResponse(**kwargs)


def test_a_sender_checks_its_arguments_and_has_no_close():
    sender = pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[]) \
        .get_response_sender()
    with pytest.raises(TritonModelException, match="Unsupported flag provided."):
        sender.send(pb_utils.InferenceResponse(), flags=2)
    with pytest.raises(TritonModelException, match="Inference Response object must be provided"):
        sender.send(None, flags=0)
    with pytest.raises(TritonModelException, match="no reference to the decoupled state"):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert not hasattr(sender, "close") and not sender.is_cancelled()


# Requests built for BLS.

def _request(**kwargs):
    arguments = {"model_name": "m", "inputs": [pb_utils.Tensor("x", np.ones(2, np.int32))],
                 "requested_output_names": ["y"]}
    arguments.update(kwargs)
    return pb_utils.InferenceRequest(**arguments)


@pytest.mark.parametrize("kwargs, error", [
    ({"inputs": [None]}, TritonModelException),
    ({"inputs": None}, TypeError),
    ({"model_name": None}, TypeError),
    ({"requested_output_names": [None]}, TypeError),
    ({"requested_output_names": None}, TypeError),
    ({"correlation_id": None}, TypeError),
    ({"correlation_id": 1.5}, TritonModelException),
    ({"request_id": None}, TypeError),
    ({"model_version": None}, TypeError),
    ({"flags": None}, TypeError),
    ({"parameters": {"f": 0.5}}, TritonModelException),
])
def test_inference_request_refuses_what_triton_refuses(kwargs, error):
    with pytest.raises(error):
        _request(**kwargs)


def test_inference_request_holds_what_it_was_given():
    with pytest.raises(TypeError, match="missing required argument 'model_name'"):
        pb_utils.InferenceRequest(inputs=[], requested_output_names=[])
    request = _request(model_name=b"add_sub", correlation_id="seq-5", request_id="7",
                       flags=pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
                       parameters={"p": 3}, timeout=1000)
    assert request.correlation_id() == "seq-5" and request.request_id() == "7"
    assert request.requested_output_names() == {"y"} and request.timeout() == 1000
    assert json.loads(request.parameters()) == {"p": 3} and request.flags() == 1
    assert pb_utils.get_input_tensor_by_name(request, "x").as_numpy().tolist() == [1, 1]
    assert pb_utils.get_input_tensor_by_name(request, "z") is None
    assert _request().correlation_id() == 0 and not _request().is_cancelled()
    assert _request().trace().get_context() is None
    request.set_flags(pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END)
    assert request.flags() == 2
    assert request._call().model_name == "add_sub"  # a model name read from a BYTES tensor


def test_bls_needs_a_server_and_is_refused_around_initialize():
    with pytest.raises(TritonModelException, match="needs a chorus server"):
        _request().exec()
    with bls.forbidden():
        with pytest.raises(TritonModelException,
                           match="BLS is only supported during the 'execute' function."):
            _request().exec(decoupled=True)

        async def call_async():
            return await _request().async_exec()
        with pytest.raises(TritonModelException, match="BLS is only supported"):
            asyncio.run(call_async())
    bls.check_allowed()


# What execute returns.

def test_execute_returns_are_checked_with_tritons_messages():
    requests = [_request(), _request()]
    response = pb_utils.InferenceResponse()
    assert checked_return(None, requests, False, "m_0_0") is None
    assert checked_return([response, None], requests, False, "m_0_0") == [response, None]
    cases = [
        ([response, response], True, "Python model 'm_0_0' is using the decoupled mode and the "
         "execute function must return None."),
        ({}, False, "Expected a list in the execute return, found type '<class 'dict'>'."),
        ([response], False, "Number of InferenceResponse objects do not match the number of "
         "InferenceRequest objects. InferenceRequest(s) size is:2, and InferenceResponse(s) "
         "size is:1\n"),
        ([response, "x"], False, "Expected an 'InferenceResponse' object in the execute "
         "function return list, found type '<class 'str'>'."),
    ]
    for returned, decoupled, message in cases:
        with pytest.raises(BackendError) as raised:
            checked_return(returned, requests, decoupled, "m_0_0")
        assert str(raised.value) == message
    requests[1].set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    with pytest.raises(BackendError, match="for reschduled request, found type"):
        checked_return([None, response], requests, False, "m_0_0")


def test_failures_read_as_tritons():
    prefix = "Failed to process the request(s) for model 'm_0_0', message: "
    assert failure_message("m_0_0", BackendError("plain")) == prefix + "plain"
    try:
        raise ValueError("boom")
    except ValueError as e:
        message = failure_message("m_0_0", e)
    assert message.startswith(prefix + "ValueError: boom\n\nAt:\n  ")
    assert message.endswith("): test_failures_read_as_tritons\n")


# The model configuration.

def test_model_config_batching_rules():
    empty = {"name": "", "max_batch_size": 0, "input": [], "output": []}
    assert pb_utils.ModelConfig("{}").as_dict() == empty == pb_utils.ModelConfig({}).as_dict()
    config = pb_utils.ModelConfig({"name": "m", "max_batch_size": 8})
    config.set_max_batch_size(16)
    with pytest.raises(ValueError, match="configuration specified max_batch_size 16, but in "
                       "auto-complete-config function for model 'm' specified max_batch_size 4"):
        config.set_max_batch_size(4)
    config.set_dynamic_batching()
    assert config.as_dict()["dynamic_batching"] == {}
    sequence = pb_utils.ModelConfig({"name": "m", "sequence_batching": {}})
    with pytest.raises(ValueError, match="scheduling_choice as 'sequence_batching'"):
        sequence.set_dynamic_batching()


def test_model_config_adds_and_merges_inputs_and_outputs():
    config = pb_utils.ModelConfig({"name": "m", "input": [
        {"name": "a", "data_type": "TYPE_INVALID", "dims": []}]})
    config.add_input({"name": "a", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
    config.add_input({"name": "b", "data_type": "TYPE_INT32", "dims": [-1]})
    config.add_output({"name": "y", "data_type": "TYPE_FP32", "dims": [4]})
    assert config.as_dict()["input"] == [
        {"name": "a", "data_type": "TYPE_FP32", "dims": [4], "optional": True},
        {"name": "b", "data_type": "TYPE_INT32", "dims": [-1]}]
    assert pb_utils.get_output_config_by_name(config.as_dict(), "y")["dims"] == [4]
    assert pb_utils.get_input_config_by_name(config.as_dict(), "c") is None


@pytest.mark.parametrize("kind, tensor, message", [
    ("input", {"name": "a", "data_type": "TYPE_INT8", "dims": [4]},
     "unable to load model 'm', configuration expects datatype TYPE_FP32 for input 'a', model "
     "provides TYPE_INT8"),
    ("input", {"name": "a", "data_type": "TYPE_FP32", "dims": [5]},
     "model 'm', tensor 'a': the model expects dims [5] but the model configuration specifies "
     "dims [4]"),
    ("input", {"name": "a", "data_type": "TYPE_FP32", "dims": [4], "optional": True},
     "model 'm', tensor 'a': the model expects optional True but the model configuration "
     "specifies optional False"),
    ("input", {"name": "a", "data_type": "TYPE_FP32", "dims": [4], "format": "x"},
     "input 'a' in auto-complete-config function for model 'm' contains property other than "
     "'name', 'data_type', 'dims' and 'optional'."),
    ("output", {"name": "a", "data_type": "TYPE_FP32", "dims": [4], "optional": True},
     "output 'a' in auto-complete-config function for model 'm' contains property other than "
     "'name', 'data_type' and 'dims'."),
    ("input", {"data_type": "TYPE_FP32", "dims": [4]},
     "input in auto-complete-config function for model 'm' is missing 'name' property."),
    ("output", {"name": "b", "dims": [4]},
     "output 'b' in auto-complete-config function for model 'm' is missing 'data_type' "
     "property."),
    ("input", {"name": "b", "data_type": "TYPE_FP32"},
     "input 'b' in auto-complete-config function for model 'm' is missing 'dims' property."),
])
def test_model_config_refuses_conflicts_with_tritons_messages(kind, tensor, message):
    declared = {"name": "a", "data_type": "TYPE_FP32", "dims": [4], "optional": False}
    config = pb_utils.ModelConfig({"name": "m", "input": [dict(declared)],
                                   "output": [dict(declared)]})
    with pytest.raises(ValueError) as raised:
        getattr(config, f"add_{kind}")(tensor)
    assert str(raised.value) == message


def test_model_config_transaction_policy_and_helpers():
    config = pb_utils.ModelConfig({"name": "m"})
    assert not pb_utils.using_decoupled_model_transaction_policy(config.as_dict())
    config.set_model_transaction_policy({"decoupled": True})
    assert pb_utils.using_decoupled_model_transaction_policy(config.as_dict())
    with pytest.raises(ValueError, match="which is already set to 'True'."):
        config.set_model_transaction_policy({"decoupled": False})
    with pytest.raises(ValueError, match="contains property other than 'decoupled'."):
        config.set_model_transaction_policy({"other": 1})


# Metrics, logging, model control (their checks; the server-level tests run them).

def test_metric_operations_follow_each_kind():
    assert operation_error(MetricKind.COUNTER, "increment", 2.0) is None
    assert operation_error(MetricKind.COUNTER, "increment", -1.0) == (
        "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only be "
        "incremented monotonically by non-negative values.")
    assert operation_error(MetricKind.COUNTER, "set", 1.0) == (
        "Failed to set metric value: TRITONSERVER_METRIC_KIND_COUNTER does not support Set")
    assert operation_error(MetricKind.GAUGE, "increment", -1.0) is None
    assert operation_error(MetricKind.GAUGE, "observe", 1.0).endswith("does not support Observe")
    assert operation_error(MetricKind.HISTOGRAM, "observe", 1.0) is None
    assert operation_error(MetricKind.HISTOGRAM, "value") == (
        "Failed to get metric value: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value")


def test_metric_labels_and_buckets_are_checked():
    assert checked_labels(None) == {} and checked_labels({"model": "m"}) == {"model": "m"}
    with pytest.raises(TritonModelException, match="Labels must be a dictionary."):
        checked_labels(["model"])
    assert checked_buckets(MetricKind.HISTOGRAM, [1, 2.5]) == [1.0, 2.5]
    assert checked_buckets(MetricKind.HISTOGRAM, []) == []
    assert checked_buckets(MetricKind.COUNTER, None) == []
    for kind, buckets, text in [(MetricKind.HISTOGRAM, None, "Missing required buckets."),
                                (MetricKind.GAUGE, [1.0], "Unexpected buckets found."),
                                (MetricKind.HISTOGRAM, (1.0,), "Buckets must be a list."),
                                (MetricKind.HISTOGRAM, [2.0, 1.0], "strictly sorted"),
                                (MetricKind.HISTOGRAM, [1.0, 1.0], "strictly sorted")]:
        with pytest.raises(TritonModelException, match=text):
            checked_buckets(kind, buckets)


def test_metric_families_need_their_arguments_and_a_server():
    assert pb_utils.MetricFamily.COUNTER == 0 and pb_utils.MetricFamily.HISTOGRAM == 2
    with pytest.raises(TypeError):
        pb_utils.MetricFamily(name=None, description="d", kind=pb_utils.MetricFamily.GAUGE)
    with pytest.raises(TypeError):
        pb_utils.MetricFamily(name="n", description="d", kind=1)
    with pytest.raises(TritonModelException, match="needs a chorus server"):
        pb_utils.MetricFamily(name="n", description="d", kind=pb_utils.MetricFamily.GAUGE)


def test_logger_takes_strings_and_its_levels(capsys):
    logger = pb_utils.Logger
    for call in (lambda: logger.log("x", None), lambda: logger.log("x", 1),
                 lambda: logger.log_info(None), lambda: logger.log_warn(None),
                 lambda: logger.log_error(None), lambda: logger.log_verbose(None)):
        with pytest.raises(TypeError):
            call()
    logger.log("level unspecified")
    logger.log("careful", logger.WARNING)
    logger.log_verbose("details")
    assert capsys.readouterr().err.splitlines() == [
        "INFO: level unspecified", "WARNING: careful", "VERBOSE: details"]


def test_model_control_checks_its_arguments_and_needs_a_server():
    with pytest.raises(TritonModelException, match="files should be a dictionary"):
        pb_utils.load_model("m", "{}", files=[b"x"])
    with pytest.raises(TypeError):
        pb_utils.load_model(None)
    for call in (lambda: pb_utils.load_model("m"), lambda: pb_utils.unload_model("m"),
                 lambda: pb_utils.is_model_ready("m")):
        with pytest.raises(TritonModelException, match="needs a chorus server"):
            call()
    with pytest.raises(TritonModelException, match="only available to a model's own modules"):
        pb_utils.get_model_dir()


# Each model's own modules.

def _write(folder, files):
    for path, text in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(textwrap.dedent(text))


def _model_files(name):
    return {"1/model.py": """
                import json
                import util
                from util import NAME
                from . import helper
                import shared.sub

                def late_names():  # imports at call time resolve the same way
                    import util as late
                    from helper import which
                    return late.NAME, which()

                def count():
                    util.COUNT += 1
                    return util.COUNT
                """,
            "1/util.py": f"NAME = '{name}'\nCOUNT = 0\n",
            "1/helper.py": f"def which():\n    return '{name} helper'\n",
            "1/json.py": "SHADOWS = True\n",  # an installed module wins, as in Triton
            "shared/__init__.py": "", "shared/sub.py": f"WHERE = '{name} model dir'\n"}


def test_models_with_the_same_file_names_load_side_by_side(tmp_path):
    namespaces = []
    for name in ("first", "second"):
        _write(tmp_path / name, _model_files(name))
        dirs = [str(tmp_path / name / "1"), str(tmp_path / name)]
        namespaces.append(ModelNamespace(f"{name}/1", dirs))
    first, second = (n.load_file(os.path.join(n.search_dirs[0], "model.py"), "model")
                     for n in namespaces)
    assert (first.NAME, second.NAME) == ("first", "second")
    assert first.late_names() == ("first", "first helper")
    assert second.late_names() == ("second", "second helper")
    assert (first.shared.sub.WHERE, second.shared.sub.WHERE) == ("first model dir",
                                                                 "second model dir")
    assert (first.count(), first.count(), second.count()) == (1, 2, 1)  # state per model
    assert first.json is sys.modules["json"] and not hasattr(first.json, "SHADOWS")
    assert first.util is sys.modules[f"{namespaces[0].package_name}.util"]
    assert first.__name__.startswith(ROOT + ".") and "util" not in sys.modules
    for namespace in namespaces:
        namespace.close()
        assert not [n for n in sys.modules if n.startswith(namespace.package_name)]


ECHO_MODEL = """
    import asyncio
    import triton_python_backend_utils as pb_utils
    from util import READY

    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(config):
            config.add_input({"name": "x", "data_type": "TYPE_FP32", "dims": [2]})
            config.set_max_batch_size(4)
            return config if READY else None

        def initialize(self, args):
            self.args, self.model_dir, self.ready = args, pb_utils.get_model_dir(), READY
            request = pb_utils.InferenceRequest(model_name="m", inputs=[],
                                                requested_output_names=[])
            try:
                request.exec()
            except pb_utils.TritonModelException as e:
                self.bls_error = str(e)

        async def is_ready(self):
            await asyncio.sleep(0)
            return self.ready

        def finalize(self):
            raise RuntimeError("finalize failed, which is only logged")
    """


def test_backend_loads_completes_and_runs_an_instance(tmp_path, capsys):
    assert sys.modules["triton_python_backend_utils"] is pb_utils
    assert sys.modules["c_python_backend_utils"].Tensor is pb_utils.Tensor
    _write(tmp_path / "echo", {"1/model.py": ECHO_MODEL, "1/util.py": "READY = True\n"})
    backend.load("echo/1", "echo", "1", str(tmp_path / "echo"), "model.py")
    config = json.loads(backend.auto_complete_config("echo/1", json.dumps({"name": "echo"})))
    assert config["max_batch_size"] == 4 and config["input"][0]["name"] == "x"
    # The args reach initialize in Triton's key order, whatever order C++ gave them in.
    order = ["model_config", "model_instance_kind", "model_instance_name",
             "model_instance_device_id", "model_repository", "model_version", "model_name"]
    args = {key: "x" for key in reversed(order)} | {"model_config": json.dumps(config)}
    backend.create_instance("echo/1", "echo_0_0", args)
    model = backend._instances[("echo/1", "echo_0_0")].model
    assert backend.has_is_ready("echo/1")
    assert model.args == args and list(model.args) == order
    assert model.model_dir == str(tmp_path / "echo" / "1")
    assert model.bls_error == "BLS is only supported during the 'execute' function."
    assert backend.is_ready("echo/1", "echo_0_0")
    model.ready = "yes"  # not a bool: not ready
    assert not backend.is_ready("echo/1", "echo_0_0")
    backend.finalize("echo/1", "echo_0_0")
    assert "finalize failed, which is only logged" in capsys.readouterr().err
    assert not backend.is_ready("echo/1", "echo_0_0")
    backend.unload("echo/1")
    assert not [n for n in sys.modules if n.startswith(ROOT + ".m_echo")]


def test_backend_load_errors_read_as_tritons(tmp_path):
    with pytest.raises(FileNotFoundError, match="Python model file not found in '.*model.py'"):
        backend.load("none/1", "none", "1", str(tmp_path / "none"), "model.py")
    _write(tmp_path / "bad", {"1/model.py": "x = 1\n"})
    with pytest.raises(AttributeError, match="does not define the class 'TritonPythonModel'"):
        backend.load("bad/1", "bad", "1", str(tmp_path / "bad"), "model.py")
    _write(tmp_path / "echo", {"1/model.py": ECHO_MODEL, "1/util.py": "READY = False\n"})
    backend.load("echo/2", "echo", "1", str(tmp_path / "echo"), "model.py")
    with pytest.raises(TritonModelException, match="auto_complete_config function in model "
                       "'echo' must return a valid pb.ModelConfig object."):
        backend.auto_complete_config("echo/2", "{}")
    backend.unload("echo/2")
