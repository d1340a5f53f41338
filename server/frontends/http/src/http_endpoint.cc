#include "chorus/server/frontends/http/http_endpoint.h"

#include <sys/socket.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "chorus/server/frontends/http/http_status.h"

namespace chorus {
namespace {

constexpr char kJson[] = "application/json";

// What an error httplib answers itself (no route ran) says.
std::string RoutingErrorMessage(const httplib::Request& request, int http_status,
                                int64_t max_body_bytes) {
  switch (http_status) {
    case 413:
      return "the request body exceeds the server's limit of " + std::to_string(max_body_bytes) +
             " bytes";
    case 404:
      return "no such endpoint: " + request.method + " " + request.path;
    case 400:
      return "the request could not be read";
    default:
      return "the request could not be served";
  }
}

// cpp-httplib compresses every JSON answer with whatever the client accepts
// (brotli first), choosing from the request's Accept-Encoding, and hands
// handlers the request const. The request is the server's own object, so the
// choice is made here, before routing, by rewriting that header: gzip or
// nothing for `compressible` paths, nothing for the others.
void LimitCompression(const httplib::Request& request,
                      const std::function<bool(const std::string&)>& compressible) {
  auto& headers = const_cast<httplib::Request&>(request).headers;
  auto accepted = headers.find("Accept-Encoding");
  if (accepted == headers.end()) return;
  const bool gzip = accepted->second.find("gzip") != std::string::npos;
  headers.erase("Accept-Encoding");
  if (gzip && compressible && compressible(request.path)) {
    headers.emplace("Accept-Encoding", "gzip");
  }
}

bool HasBody(const httplib::Request& request) {
  const std::string encoding = request.get_header_value("Transfer-Encoding");
  return request.has_header("Content-Length") || encoding.find("chunked") != std::string::npos;
}

}  // namespace

void AddPostRoute(httplib::Server* server, const std::string& pattern,
                  httplib::Server::Handler handler) {
  server->Post(pattern, [handler = std::move(handler)](const httplib::Request& request,
                                                       httplib::Response& response,
                                                       const httplib::ContentReader& reader) {
    if (HasBody(request)) {
      std::string body;
      const std::string length = request.get_header_value("Content-Length");
      if (!length.empty() && length.size() < 12) body.reserve(std::stoull(length));
      const bool read = reader([&body](const char* data, size_t size) {
        body.append(data, size);
        return true;
      });
      if (!read) {
        // cpp-httplib set the status (413, 400); the error handler writes the body.
        if (response.status < 400) response.status = 400;
        response.set_header("Connection", "close");
        return;
      }
      // The request is the server's own object; the handler reads it const.
      const_cast<httplib::Request&>(request).body = std::move(body);
    }
    handler(request, response);
  });
}

HttpEndpoint::HttpEndpoint(const HttpEndpointOptions& options) {
  if (options.request_threads > 0) {
    const int threads = options.request_threads;
    server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  }
  // Off by default in cpp-httplib: every answer would wait ~40 ms for the
  // client's delayed ACK (Nagle).
  server_->set_tcp_nodelay(true);
  // cpp-httplib sets SO_REUSEPORT by default: two servers would share a port
  // silently. Only cells share one.
  server_->set_socket_options([reuse_port = options.reuse_port](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (reuse_port) ::setsockopt(sock, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof(yes));
  });
  const int64_t max_body = options.max_body_bytes;
  if (max_body > 0) server_->set_payload_max_length(static_cast<size_t>(max_body));
  server_->set_error_handler(
      [this, max_body](const httplib::Request& request, httplib::Response& response) {
        // cpp-httplib calls this for every answer of 400 or more, routed or
        // not, before it compresses: an error is never compressed (Triton's
        // rule; tritonclient.http.aio cannot read a compressed error).
        const_cast<httplib::Request&>(request).headers.erase("Accept-Encoding");
        if (!response.body.empty()) return;
        const std::string message = RoutingErrorMessage(request, response.status, max_body);
        response.set_content(ErrorBodyFor(request.path, message, response.status), kJson);
      });
  const Authorizer* authorizer = options.authorizer;
  server_->set_pre_routing_handler(
      [this, authorizer, compressible = options.compressible, open_paths = options.open_paths](
          const httplib::Request& request, httplib::Response& response) {
        LimitCompression(request, compressible);
        const bool open = std::any_of(open_paths.begin(), open_paths.end(), [&](const auto& path) {
          return request.path.rfind(path, 0) == 0;
        });
        if (authorizer == nullptr || open) return httplib::Server::HandlerResponse::Unhandled;
        Status allowed = authorizer->Check(request.get_header_value("Authorization"));
        if (allowed.ok()) return httplib::Server::HandlerResponse::Unhandled;
        ReplyError(request.path, response, allowed);
        return httplib::Server::HandlerResponse::Handled;
      });
}

HttpEndpoint::~HttpEndpoint() { Stop(); }

void HttpEndpoint::SetErrorBody(const std::string& prefix, ErrorBody body) {
  error_bodies_[prefix] = std::move(body);
}

std::string HttpEndpoint::ErrorBodyFor(const std::string& path, const std::string& message,
                                       int http_status) const {
  const ErrorBody* chosen = nullptr;
  size_t longest = 0;
  for (const auto& [prefix, body] : error_bodies_) {
    if (path.rfind(prefix, 0) == 0 && prefix.size() >= longest) {
      chosen = &body;
      longest = prefix.size();
    }
  }
  if (chosen != nullptr) return (*chosen)(message, http_status);
  return nlohmann::json{{"error", message}}.dump(-1, ' ', false,
                                                 nlohmann::json::error_handler_t::replace);
}

void HttpEndpoint::ReplyError(const std::string& path, httplib::Response& response,
                              const Status& status) const {
  response.status = HttpStatusCode(status.code());
  response.set_content(ErrorBodyFor(path, std::string(status.message()), response.status), kJson);
}

Status HttpEndpoint::Serve(const std::string& host, int requested, const std::string& what) {
  port_ = requested == 0 ? server_->bind_to_any_port(host)
                         : (server_->bind_to_port(host, requested) ? requested : -1);
  if (port_ < 0) {
    return UnavailableError("cannot listen for " + what + " on port " + std::to_string(requested));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return OkStatus();
}

void HttpEndpoint::Stop() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace chorus
