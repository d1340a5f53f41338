// torch.classes.chorus.PythonBackendRequest: one request as a Python-backend
// model's code sees it (chorus.triton wraps it in pb_utils.InferenceRequest):
// its inputs, its attributes, and send(), which answers it. A torch custom
// class, so that every interpreter reaches the same C++ object, from any of
// its threads, also after execute() returned (a decoupled model's senders).
// Tensors cross as new aliases both ways (tensor_crossing.h), never copies.
#ifndef CHORUS_SERVER_PYTHON_BACKEND_SRC_REQUEST_HANDLE_H_
#define CHORUS_SERVER_PYTHON_BACKEND_SRC_REQUEST_HANDLE_H_

#include <ATen/core/ivalue.h>

#include <memory>

#include "chorus/package/manifest.h"
#include "server/python_backend/src/open_requests.h"

namespace chorus::python_backend {

// A handle for `request` of a model whose signature is `signature` (which
// the caller keeps alive as long as the handle can be). When the model lets
// go of the handle without a final response, the request fails.
c10::IValue RequestHandle(std::shared_ptr<OpenRequest> request,
                          std::shared_ptr<const Manifest> signature);

}  // namespace chorus::python_backend

#endif  // CHORUS_SERVER_PYTHON_BACKEND_SRC_REQUEST_HANDLE_H_
