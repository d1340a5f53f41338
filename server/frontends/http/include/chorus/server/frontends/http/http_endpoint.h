// server/frontends/http/: chorus' HTTP APIs' shared ground and KServe v2's
// REST API. HttpEndpoint is one listening HTTP server (cpp-httplib) on its
// own thread, set up as every API on it needs: a bounded pool of request
// threads, TCP_NODELAY, a body limit, bearer-token authorization of every
// route but the health probes, and errors rendered in the shape of the API a
// path belongs to. The APIs (rest_service.h, the OpenAI frontend) add their
// routes to it.
#ifndef CHORUS_SERVER_FRONTENDS_HTTP_HTTP_ENDPOINT_H_
#define CHORUS_SERVER_FRONTENDS_HTTP_HTTP_ENDPOINT_H_

#include <httplib.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/server/rpc/authorizer.h"

namespace chorus {

struct HttpEndpointOptions {
  // Requests served at once (threads of cpp-httplib's pool; beyond them,
  // connections queue); 0: cpp-httplib's default.
  int request_threads = 0;
  int64_t max_body_bytes = 0;  // larger bodies get 413; 0: no limit
  // When set, every route but those under `open_paths` needs its bearer
  // token. Outlives the endpoint.
  const Authorizer* authorizer = nullptr;
  // Path prefixes served without a token: the health probes.
  std::vector<std::string> open_paths = {"/v2/health/"};
  // Successful answers to the paths it accepts are gzip-compressed when the
  // client accepts gzip (never brotli); all others, and every error, are
  // never compressed. Unset: none.
  std::function<bool(const std::string& path)> compressible;
  // Share the port with other processes that set it too (serving cells);
  // otherwise a port in use is an error.
  bool reuse_port = false;
};

// Adds a POST route to `server` whose handler finds the whole body in
// request.body, read here rather than by cpp-httplib 0.11, which waits for the
// connection to close when a POST has neither Content-Length nor chunked
// encoding (`curl -X POST`: no body, as Triton reads it) and refuses
// form-encoded bodies over 8 KiB (`curl -d`, urllib). Any content type is
// read as the body it is, as Triton does. Before the endpoint serves.
void AddPostRoute(httplib::Server* server, const std::string& pattern,
                  httplib::Server::Handler handler);

class HttpEndpoint {
 public:
  // An error's body from its message and HTTP status code.
  using ErrorBody = std::function<std::string(const std::string& message, int http_status)>;

  explicit HttpEndpoint(const HttpEndpointOptions& options);
  // Stop().
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Where routes are added (before Serve).
  httplib::Server& routes() { return *server_; }
  // Errors on paths under `prefix` get `body` (the longest prefix wins);
  // others KServe's {"error": message}. Before Serve.
  void SetErrorBody(const std::string& prefix, ErrorBody body);
  // Answers `status` (an error) in the shape of `path`'s API.
  void ReplyError(const std::string& path, httplib::Response& response, const Status& status) const;

  // Binds `requested` (0: any free port) on `host` and serves on a thread of
  // its own; `what` names the endpoint in the error (UNAVAILABLE).
  Status Serve(const std::string& host, int requested, const std::string& what);
  // The port bound; -1 before Serve.
  int port() const { return port_; }
  // Stops serving and joins. Idempotent.
  void Stop();

 private:
  std::string ErrorBodyFor(const std::string& path, const std::string& message,
                           int http_status) const;

  std::unique_ptr<httplib::Server> server_ = std::make_unique<httplib::Server>();
  std::map<std::string, ErrorBody> error_bodies_;  // by path prefix
  std::thread thread_;
  int port_ = -1;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_FRONTENDS_HTTP_HTTP_ENDPOINT_H_
