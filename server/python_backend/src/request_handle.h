// PythonBackendRequest: one request as a Python-backend model's code sees it
// (chorus.triton wraps it in pb_utils.InferenceRequest): its attributes, and
// send(), which answers it. A HostObject (chorus/interpreter/host_object.h),
// so that the interpreter reaches the C++ object from any of its threads,
// also after execute() returned (a decoupled model's senders). What every
// request needs (its inputs, the outputs asked for) comes with the handle in
// one value, so a plain request makes one method call: send().
// Tensors cross as new aliases both ways (pyside's conversion, tensor_crossing.h),
// never copies.
#ifndef CHORUS_SERVER_PYTHON_BACKEND_SRC_REQUEST_HANDLE_H_
#define CHORUS_SERVER_PYTHON_BACKEND_SRC_REQUEST_HANDLE_H_

#include <ATen/core/ivalue.h>

#include <memory>

#include "chorus/package/manifest.h"
#include "server/python_backend/src/open_requests.h"

namespace chorus::python_backend {

// (handle, inputs, bytes_shapes, requested_output_names) for `request` of a
// model whose signature is `signature` (which the caller keeps alive as long
// as the handle can be): the handle; the inputs given by name, BYTES ones in
// their raw layout (Triton's serialization, uint8) with their shapes in
// bytes_shapes; the outputs the client asked for (empty: all). When the
// model lets go of the handle without a final response, the request fails.
c10::IValue ReceivedRequest(std::shared_ptr<OpenRequest> request,
                            std::shared_ptr<const Manifest> signature);

}  // namespace chorus::python_backend

#endif  // CHORUS_SERVER_PYTHON_BACKEND_SRC_REQUEST_HANDLE_H_
