"""Response senders of Triton Python-backend models on chorus-server, over tritonclient's
gRPC streams (and unary calls for default-mode models): decoupled models sending from
threads after `execute` returned, the final flag with and without a response and
`triton_enable_empty_final_response`, error responses in a stream, Triton's refusals
(a send after the final one, a decoupled execute returning a list, a default-mode model's
second response or lone final flag), `async def execute` in both modes, and a client's
cancellation seen by `request.is_cancelled()` and `sender.is_cancelled()`."""

import json

import numpy as np
import pytest

from triton_models import (Stream, TritonServer, error_of, final, grpcclient, inputs_of,
                           wait_until, write_model)

# MODE: 0 sends two responses from a thread once execute returned, the second one FINAL;
# 1 sends two, then the final flag alone; 2 only the final flag; 3 a final error response;
# 4 raises; 5 returns a list; 6 an error response, then a final one; 7 sends a final
# response, then tries another (the refusal kept); 8 answers the refusal kept.
DECOUPLED_PY = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


def response(value, **kwargs):
    return pb_utils.InferenceResponse(
        [pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))], **kwargs)


class TritonPythonModel:
    def initialize(self, args):
        self.refusal = "none"
        self.threads = []

    def execute(self, requests):
        FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        returned = threading.Event()
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            sender = request.get_response_sender()
            if mode == 0:
                def later(sender=sender):
                    returned.wait()
                    sender.send(response(1, parameters={"k": "v", "n": 2}))
                    sender.send(response(2), flags=FINAL)
                self.threads.append(threading.Thread(target=later))
                self.threads[-1].start()
            elif mode == 1:
                sender.send(response(1))
                sender.send(response(2))
                sender.send(flags=FINAL)
            elif mode == 2:
                sender.send(flags=FINAL)
            elif mode == 3:
                error = pb_utils.TritonError("dec err", pb_utils.TritonError.INVALID_ARG)
                sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
            elif mode == 4:
                raise ValueError("decoupled raise")
            elif mode == 5:
                return [response(5) for _ in requests]
            elif mode == 6:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("midway")))
                sender.send(response(6), flags=FINAL)
            elif mode == 7:
                sender.send(response(7), flags=FINAL)
                try:
                    sender.send(response(8))
                except pb_utils.TritonModelException as e:
                    self.refusal = str(e)
            elif mode == 8:
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("TEXT", np.array([self.refusal.encode()], np.object_))]),
                    flags=FINAL)
        returned.set()
        return None

    def finalize(self):
        for thread in self.threads:
            thread.join()
"""

DECOUPLED_CONFIG = """
backend: "python"
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

# A default-mode model answering through its sender. MODE: 0 sends its response FINAL and
# returns None; 1 sends the final flag first; 2 sends one response, then tries a second
# (the refusal kept) and returns None; 3 answers the refusal kept; 4 returns None, sending
# nothing; 5 returns None, and a thread sends the response.
SENDER_RULES_PY = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.refusal = "none"

    def execute(self, requests):
        FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            sender = request.get_response_sender()
            text = pb_utils.Tensor("TEXT", np.array([self.refusal.encode()], np.object_))
            out = pb_utils.Tensor("OUT", np.array([mode], np.int32))
            if mode == 0:
                sender.send(pb_utils.InferenceResponse([out]), flags=FINAL)
            elif mode == 1:
                sender.send(flags=FINAL)
            elif mode == 2:
                sender.send(pb_utils.InferenceResponse([out]))
                try:
                    sender.send(pb_utils.InferenceResponse([out]))
                except pb_utils.TritonModelException as e:
                    self.refusal = str(e)
            elif mode == 3:
                return [pb_utils.InferenceResponse([text])]
            elif mode == 5:
                threading.Thread(target=sender.send, args=(pb_utils.InferenceResponse([out]),),
                                 kwargs={"flags": FINAL}).start()
        return None
"""

SENDER_RULES_CONFIG = DECOUPLED_CONFIG.replace(
    "model_transaction_policy { decoupled: true }\n", "")

# async def execute, default mode: OUT = MODE + 1.
ASYNC_DEFAULT_PY = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.sleep(0)
        values = [pb_utils.get_input_tensor_by_name(r, "MODE").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", v + 1)]) for v in values]
"""

# async def execute, decoupled, one instance: a request with MODE 1 waits (a minute at
# most) for one with MODE 2 to come; only coroutines running side by side can meet. MODE 3
# raises.
ASYNC_DECOUPLED_PY = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.arrived = None

    async def execute(self, requests):
        if self.arrived is None:
            self.arrived = asyncio.Event()
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            if mode == 1:
                await asyncio.wait_for(self.arrived.wait(), 60)
            elif mode == 3:
                raise ValueError("async raise")
            else:
                self.arrived.set()
            request.get_response_sender().send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([mode], np.int32))]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

# Streams responses from a thread until the request is cancelled (a minute at most), then
# writes what it saw into the file the request's parameters name.
UNTIL_CANCELLED_PY = """
import json, threading, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.stream, args=(request,)).start()

    def stream(self, request):
        sender = request.get_response_sender()
        marker = json.loads(request.parameters())["marker"]
        deadline = time.monotonic() + 60
        sent, error = 0, None
        try:
            while not request.is_cancelled() and time.monotonic() < deadline:
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([sent], np.int32))]))
                sent += 1
                time.sleep(0.01)
            seen = {"request": request.is_cancelled(), "sender": sender.is_cancelled()}
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as e:
            error = repr(e)
        with open(marker, "w") as f:
            json.dump({"seen": seen, "sent": sent, "error": error}, f)
"""

# Default mode: says it started (the marker's name plus ".started"), waits (a minute at
# most) until its request is cancelled, then writes what it saw into the marker file the
# request's parameters name.
CANCEL_PROBE_PY = """
import json, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        marker = json.loads(requests[0].parameters())["marker"]
        open(marker + ".started", "w").close()
        deadline = time.monotonic() + 60
        while not requests[0].is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.01)
        with open(marker, "w") as f:
            json.dump({"cancelled": requests[0].is_cancelled()}, f)
        error = pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)
        return [pb_utils.InferenceResponse(error=error) for _ in requests]
"""

# Decoupled, keeps every request it gets (as models that hand requests to threads do);
# writes a file when finalized.
KEEPER_PY = """
import json, os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.folder = args["model_repository"]
        self.kept = []

    def execute(self, requests):
        for request in requests:
            self.kept.append(request)
            request.get_response_sender().send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([1], np.int32))]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        open(os.path.join(self.folder, "finalized"), "w").close()
"""

# Decoupled; leaves each request in a reference cycle (garbage only a collection frees).
CYCLE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            cycle = [request]
            cycle.append(cycle)
            request.get_response_sender().send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([1], np.int32))]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    repo = tmp_path_factory.mktemp("triton_decoupled") / "repository"
    write_model(repo, "dec", DECOUPLED_CONFIG, DECOUPLED_PY)
    write_model(repo, "sender_rules", SENDER_RULES_CONFIG, SENDER_RULES_PY)
    write_model(repo, "async_default", SENDER_RULES_CONFIG, ASYNC_DEFAULT_PY)
    write_model(repo, "async_dec", DECOUPLED_CONFIG, ASYNC_DECOUPLED_PY)
    write_model(repo, "until_cancelled", DECOUPLED_CONFIG, UNTIL_CANCELLED_PY)
    write_model(repo, "cancel_probe", SENDER_RULES_CONFIG, CANCEL_PROBE_PY)
    write_model(repo, "keeper", DECOUPLED_CONFIG, KEEPER_PY)
    server = TritonServer(repo)
    server.repo = repo
    yield server
    assert server.stop() == 0


@pytest.fixture
def stream(triton):
    opened = Stream(triton)
    yield opened
    opened.close()


def mode(value):
    return {"MODE": np.array([value], np.int32)}


def described(pairs):
    """(OUT value or None, final flag, error message or None) of each stream result."""
    out = []
    for result, error in pairs:
        if error is not None:
            out.append((None, None, error.message()))
            continue
        response = result.get_response()
        value = result.as_numpy("OUT")[0] if response.outputs else None
        out.append((None if value is None else int(value), final(result), None))
    return out


def test_a_thread_sends_after_execute_returned(triton, stream):
    stream.send("dec", mode(0), request_id="r0")
    got = stream.until_final()
    assert described(got) == [(1, False, None), (2, True, None)]
    first = got[0][0].get_response()
    assert first.id == "r0" and first.model_name == "dec" and first.model_version == "1"
    assert (first.parameters["k"].string_param, first.parameters["n"].int64_param) == ("v", 2)


@pytest.mark.parametrize("empty_final", [None, False, True])
def test_the_final_flag_alone_and_the_empty_final_response(triton, stream, empty_final):
    stream.send("dec", mode(1), request_id="r1", empty_final=empty_final)
    stream.send("dec", mode(2), request_id="r2", empty_final=empty_final)
    # The end: a request answered with a final response, on the same stream, after both.
    stream.send("dec", mode(0), request_id="end")
    got = [stream.next() for _ in range(6 if empty_final else 4)]
    ids = [result.get_response().id for result, _ in got]
    if empty_final:
        # An empty response flagged final ends each of r1 and r2.
        assert ids == ["r1", "r1", "r1", "r2", "end", "end"]
        assert described(got) == [(1, False, None), (2, False, None), (None, True, None),
                                  (None, True, None), (1, False, None), (2, True, None)]
        empty = got[3][0].get_response()
        assert (empty.model_name, empty.id, len(empty.outputs)) == ("dec", "r2", 0)
    else:
        # Nothing at all for the final flag alone.
        assert ids == ["r1", "r1", "end", "end"]
        assert described(got) == [(1, False, None), (2, False, None), (1, False, None),
                                  (2, True, None)]
    stream.assert_quiet()


def test_error_responses_arrive_in_the_stream_and_it_goes_on(triton, stream):
    stream.send("dec", mode(3), request_id="e3")
    assert described([stream.next()]) == [(None, None, "dec err")]
    stream.send("dec", mode(6), request_id="e6")
    assert described(stream.until_final()) == [(None, None, "midway")]
    assert described(stream.until_final()) == [(6, True, None)]
    stream.send("dec", mode(4), request_id="e4")
    ((_, error),) = stream.until_final()
    model_py = triton.repo / "dec" / "1" / "model.py"
    line = model_py.read_text().splitlines().index(
        '                raise ValueError("decoupled raise")') + 1
    assert error.message() == ("Failed to process the request(s) for model 'dec_0_0', message: "
                               "ValueError: decoupled raise\n\nAt:\n"
                               f"  {model_py}({line}): execute\n")
    stream.send("dec", mode(5), request_id="e5")
    ((_, error),) = stream.until_final()
    assert error.message() == ("Failed to process the request(s) for model 'dec_0_0', message: "
                               "Python model 'dec_0_0' is using the decoupled mode and the "
                               "execute function must return None.")
    stream.send("dec", mode(0), request_id="after")
    assert described(stream.until_final()) == [(1, False, None), (2, True, None)]


def test_a_send_after_the_final_one_is_refused(triton, stream):
    stream.send("dec", mode(7))
    assert described(stream.until_final()) == [(7, True, None)]
    stream.send("dec", mode(8))
    ((result, error),) = stream.until_final()
    assert error is None
    assert result.as_numpy("TEXT")[0] == \
        b"Unable to send response. Response sender has been closed."


def test_a_decoupled_model_refuses_unary_calls(triton):
    error = error_of(lambda: triton.infer("grpc", "dec", mode(0)))
    assert "decoupled" in error.message()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_default_mode_models_sender(triton, protocol):
    result = triton.infer(protocol, "sender_rules", mode(0))
    assert result.as_numpy("OUT").tolist() == [0]
    error = error_of(lambda: triton.infer(protocol, "sender_rules", mode(1)))
    model_py = triton.repo / "sender_rules" / "1" / "model.py"
    line = model_py.read_text().splitlines().index("                sender.send(flags=FINAL)") + 1
    assert error.message() == (
        "Failed to process the request(s) for model 'sender_rules_0_0', message: "
        "TritonModelException: Unable to send response. Non-decoupled model cannot send "
        f"complete final before sending a response.\n\nAt:\n  {model_py}({line}): execute\n")
    assert triton.infer(protocol, "sender_rules", mode(2)).as_numpy("OUT").tolist() == [2]
    assert triton.infer(protocol, "sender_rules", mode(3)).as_numpy("TEXT")[0] == \
        b"Unable to send response. Non-decoupled model cannot send more than one response."
    # Triton's request hangs; chorus fails it once the model let go of it.
    error = error_of(lambda: triton.infer(protocol, "sender_rules", mode(4)))
    assert "the model released the request without a final response" in error.message()
    assert triton.infer(protocol, "sender_rules", mode(5)).as_numpy("OUT").tolist() == [5]


def test_a_default_mode_model_over_a_stream_answers_once_flagged_final(triton, stream):
    stream.send("sender_rules", mode(0), request_id="s")
    ((result, error),) = stream.until_final()
    assert error is None and final(result) and result.get_response().id == "s"
    assert result.as_numpy("OUT").tolist() == [0]
    stream.send("async_default", mode(4))
    assert described(stream.until_final()) == [(5, True, None)]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_async_execute_in_default_mode(triton, protocol):
    assert triton.infer(protocol, "async_default", mode(41)).as_numpy("OUT").tolist() == [42]


def test_async_execute_decoupled_runs_requests_side_by_side_in_one_instance(triton, stream):
    stream.send("async_dec", mode(1), request_id="waits")
    stream.send("async_dec", mode(2), request_id="arrives")
    got = [stream.next(timeout=90) for _ in range(2)]
    assert [(r.get_response().id, e) for r, e in got] == [("arrives", None), ("waits", None)]
    assert [int(r.as_numpy("OUT")[0]) for r, _ in got] == [2, 1]


def test_an_async_decoupled_execute_that_raises_fails_its_requests(triton, stream):
    # Triton only logs it (the request never ends); chorus fails the request.
    stream.send("async_dec", mode(3), request_id="raises")
    ((_, error),) = stream.until_final()
    assert error.message().startswith("Failed to process the request(s) for model "
                                      "'async_dec_0_0', message: ValueError: async raise")


def test_cancelling_a_stream_is_seen_by_the_request_and_its_sender(triton, tmp_path):
    marker = tmp_path / "cancelled.json"
    stream = Stream(triton)
    stream.send("until_cancelled", mode(0), parameters={"marker": str(marker)})
    first, error = stream.next()
    assert error is None and not final(first)
    stream.close(cancel=True)
    wait_until(marker.exists, why=lambda: f"{marker} never written")
    seen = json.loads(marker.read_text())
    assert seen["error"] is None
    assert seen["seen"] == {"request": True, "sender": True}
    assert seen["sent"] >= 1


def test_cancelling_a_unary_grpc_call_is_seen_by_the_request(triton, tmp_path):
    marker = tmp_path / "cancelled.json"
    started = tmp_path / "cancelled.json.started"
    results = []
    context = triton.grpc.async_infer(
        "cancel_probe", inputs_of(grpcclient, mode(0)),
        callback=lambda result, error: results.append((result, error)),
        parameters={"marker": str(marker)})
    # Cancelled before it reaches the server, the call would never run at all (as on
    # Triton); the point here is a running request seeing its cancellation.
    wait_until(started.exists, why=lambda: "the request never started")
    context.cancel()
    wait_until(marker.exists, why=lambda: f"{marker} never written")
    assert json.loads(marker.read_text()) == {"cancelled": True}


def test_a_decoupled_model_that_keeps_its_requests_is_finalized_on_unload(triton):
    stream = Stream(triton)
    try:
        stream.send("keeper", mode(0))
        assert described(stream.until_final()) == [(1, True, None)]
    finally:
        stream.close()
    triton.http.unload_model("keeper")  # returns once the model is finalized
    assert (triton.repo / "keeper" / "finalized").exists()


def test_a_request_left_in_a_reference_cycle_does_not_crash_the_shutdown(tmp_path):
    repo = tmp_path / "repository"
    write_model(repo, "cycle", DECOUPLED_CONFIG, CYCLE_PY)
    server = TritonServer(repo)
    stream = Stream(server)
    try:
        stream.send("cycle", mode(0))
        assert described(stream.until_final()) == [(1, True, None)]
    finally:
        stream.close()
    assert server.stop() == 0
