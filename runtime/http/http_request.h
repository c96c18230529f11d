// File: runtime/http/http_request.h
//
// HTTP requests to the head's and the agents' endpoints, parsed from untrusted bytes: the request
// line and the headers of an HTTP/1.0 or 1.1 request, and nothing else (the endpoints take no
// bodies). Every limit is
// explicit, so a peer cannot make the parser allocate or loop without bound.
//
//   HttpParse p = ParseHttpRequest(buffer, /*max_bytes=*/16384);
//   if (p.state == HttpParse::kIncomplete) read more;
//   else if (p.state == HttpParse::kBad) answer p.status with p.error;
//
// Pure functions: thread-safe.
#ifndef GPUPOOL_RUNTIME_HTTP_HTTP_REQUEST_H_
#define GPUPOOL_RUNTIME_HTTP_HTTP_REQUEST_H_

#include <map>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

namespace gpupool::runtime {

struct HttpRequest {
  std::string method;  // "GET" or "HEAD"
  std::string path;    // the target before '?', percent-decoding not applied
  std::map<std::string, std::string> query;    // decoded ("a=1&b=x%20y")
  std::map<std::string, std::string> headers;  // names lower-cased; a repeated name keeps the last
  // The header's value, "" when absent.
  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond the standard ones
};

struct HttpParse {
  enum State { kIncomplete, kBad, kComplete } state = kIncomplete;
  HttpRequest request;  // kComplete
  int status = 400;     // kBad: the status to answer (400, 405, 413, 431, 505)
  std::string error;    // kBad: why, for the answer's body
};

// Parses the head of the request at the start of `bytes` (which may hold more: ignored, the
// connection closes after one answer). kBad once `bytes` exceeds `max_bytes` without a complete
// head (431), for a malformed request line or header (400), a method other than GET or HEAD (405),
// a body (413) or a version other than HTTP/1.0 and 1.1 (505).
HttpParse ParseHttpRequest(absl::string_view bytes, size_t max_bytes);

// The response's bytes: status line, Content-Type, Content-Length, Connection: close, the
// response's own headers, then the body (left out for HEAD).
std::string SerializeHttpResponse(const HttpResponse& response, bool head_only);

// "Not Found" for 404, and so on ("Unknown" for a status it does not name).
const char* HttpStatusText(int status);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_HTTP_HTTP_REQUEST_H_
