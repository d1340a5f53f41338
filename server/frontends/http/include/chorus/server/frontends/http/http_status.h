// The one place a chorus::Status becomes an HTTP status code (the body is
// kserve_json.h's RenderError). The mapping follows KServe v2 and Triton's
// HTTP endpoints: a bad request is 400, an unknown model 404, a server that
// cannot take the call now 503.
#ifndef CHORUS_SERVER_FRONTENDS_HTTP_HTTP_STATUS_H_
#define CHORUS_SERVER_FRONTENDS_HTTP_HTTP_STATUS_H_

#include "chorus/common/status.h"

namespace chorus {

inline int HttpStatusCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kOutOfRange:
    // Triton answers these three 400 too (its HttpCodeFromError), where a model's
    // pb_utils.TritonError(ALREADY_EXISTS, CANCELLED, UNKNOWN) shows them.
    case StatusCode::kAlreadyExists:
    case StatusCode::kCancelled:
    case StatusCode::kUnknown:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAborted:
      return 409;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    case StatusCode::kInternal:
    case StatusCode::kDataLoss:
      return 500;
  }
  return 500;
}

}  // namespace chorus

#endif  // CHORUS_SERVER_FRONTENDS_HTTP_HTTP_STATUS_H_
