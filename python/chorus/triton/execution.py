"""What becomes of a batch of requests once the model's `execute` returned or raised.

Default mode: `execute` returns one InferenceResponse (or None) per request, or None
altogether (then responses come through the senders); each returned response is the
request's final one, pruned to the outputs the client asked for. Decoupled mode:
`execute` returns None. Anything else is refused with Triton's message, and a refusal
or an exception in `execute` fails every request of the batch not yet finished with
"Failed to process the request(s) for model '<instance>', message: ...".

Where chorus differs from Triton: a request released with
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE is failed with UNSUPPORTED, as chorus' scheduler
does not take requests back.
"""

from typing import Any, List, Optional, Sequence

from .errors import ErrorCode, TritonModelException, describe_exception
from .requests import TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, InferenceRequest
from .responses import InferenceResponse

__all__ = ["BackendError", "checked_return", "deliver", "failure_message", "fail_unfinished",
           "fail_rescheduled"]


class BackendError(Exception):
    """An error the backend reports itself (Triton's PythonBackendException): its message
    is given as is, where a model's exception is described with its type and frames."""


def _type_of(value: Any) -> str:
    return str(type(value))


def checked_return(returned: Any, requests: Sequence[InferenceRequest], decoupled: bool,
                   instance_name: str) -> Optional[List[Any]]:
    """The responses `execute` returned, checked as Triton checks them (None: none)."""
    request_count = len(requests)
    if returned is None:
        return None
    if decoupled:
        raise BackendError(f"Python model '{instance_name}' is using the decoupled mode and the "
                           "execute function must return None.")
    if not isinstance(returned, list):
        raise BackendError(f"Expected a list in the execute return, found type "
                           f"'{_type_of(returned)}'.")
    if len(returned) != request_count:
        raise BackendError("Number of InferenceResponse objects do not match the number of "
                           f"InferenceRequest objects. InferenceRequest(s) size is:{request_count}"
                           f", and InferenceResponse(s) size is:{len(returned)}\n")
    for request, response in zip(requests, returned):
        if response is None:
            continue
        if request.release_flags() == TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise BackendError("Expected a None object in the execute function return list for "
                               f"reschduled request, found type '{_type_of(response)}'.")
        if not isinstance(response, InferenceResponse):
            raise BackendError("Expected an 'InferenceResponse' object in the execute function "
                               f"return list, found type '{_type_of(response)}'.")
    return returned


def deliver(requests: Sequence[InferenceRequest], responses: Sequence[Any]) -> None:
    """Sends each returned response as its request's final one. Every response is accepted
    (the sender may refuse: it sent already) before any is sent, as in Triton."""
    pairs = [(request.get_response_sender(), response)
             for request, response in zip(requests, responses) if response is not None]
    for sender, response in pairs:
        try:
            sender.accept_returned(response)
        except TritonModelException as e:
            raise BackendError(str(e)) from None
    for sender, response in pairs:
        sender.deliver_returned(response)


def failure_message(instance_name: str, error: BaseException) -> str:
    """What every request of a failed batch gets, in Triton's words."""
    detail = str(error) if isinstance(error, BackendError) else describe_exception(error)
    return f"Failed to process the request(s) for model '{instance_name}', message: {detail}"


def fail_unfinished(requests: Sequence[InferenceRequest], message: str) -> List[str]:
    """Ends every request not yet finished with `message` (INTERNAL) and closes every
    sender; returns what went wrong sending (each request is tried). The errors are
    returned as text: an exception kept here would hold this frame, and through it the
    requests' handles, in a reference cycle until a garbage collection."""
    errors: List[str] = []
    for request in requests:
        try:
            request.get_response_sender().fail(message, ErrorCode.INTERNAL)
        except Exception as e:  # one request's failure must not keep the others waiting
            errors.append(str(e))
    return errors


def fail_rescheduled(requests: Sequence[InferenceRequest]) -> None:
    """Fails the requests released for rescheduling, which chorus cannot re-queue."""
    for request in requests:
        if request.release_flags() == TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            request.get_response_sender().fail(
                "chorus does not reschedule requests (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)",
                ErrorCode.UNSUPPORTED)
