#include "runtime/http/http_request.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gpupool::runtime {
namespace {

constexpr size_t kMaxHeaders = 64;

bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos;
}

bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(static_cast<unsigned char>(c));
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Percent-decoding and '+' as space (form encoding); false for a broken escape.
bool Decode(absl::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      *out += ' ';
    } else if (in[i] == '%') {
      if (i + 2 >= in.size()) return false;
      int hi = HexValue(in[i + 1]), lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      *out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      *out += in[i];
    }
  }
  return true;
}

HttpParse Bad(int status, std::string why) {
  HttpParse p;
  p.state = HttpParse::kBad;
  p.status = status;
  p.error = std::move(why);
  return p;
}

}  // namespace

const char* HttpStatusText(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
  }
  return "Unknown";
}

HttpParse ParseHttpRequest(absl::string_view bytes, size_t max_bytes) {
  size_t end = bytes.find("\r\n\r\n");
  if (end == absl::string_view::npos || end + 4 > max_bytes) {
    if (bytes.size() >= max_bytes) {
      return Bad(431, absl::StrCat("the request's head is larger than ", max_bytes, " bytes"));
    }
    // A request line that can already be seen to be garbage need not wait for more bytes.
    size_t line_end = bytes.find("\r\n");
    absl::string_view first = bytes.substr(0, line_end == absl::string_view::npos ? bytes.size() : line_end);
    size_t space = first.find(' ');
    if (!first.empty() && !IsToken(first.substr(0, space == absl::string_view::npos ? first.size() : space))) {
      return Bad(400, "malformed request line");
    }
    return HttpParse{};
  }
  std::vector<absl::string_view> lines = absl::StrSplit(bytes.substr(0, end), "\r\n");
  std::vector<absl::string_view> parts = absl::StrSplit(lines[0], ' ');
  if (parts.size() != 3 || !IsToken(parts[0]) || parts[1].empty() || parts[1][0] != '/') {
    return Bad(400, "malformed request line (expected 'METHOD /path HTTP/1.1')");
  }
  if (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") {
    return Bad(parts[2].substr(0, 5) == "HTTP/" ? 505 : 400, "only HTTP/1.0 and HTTP/1.1 are spoken here");
  }
  HttpParse p;
  p.request.method = std::string(parts[0]);
  if (p.request.method != "GET" && p.request.method != "HEAD") {
    return Bad(405, absl::StrCat("method ", p.request.method, " is not allowed: GET or HEAD"));
  }
  for (char c : parts[1]) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return Bad(400, "a control character in the target");
  }
  absl::string_view target = parts[1];
  size_t q = target.find('?');
  p.request.path = std::string(target.substr(0, q));
  if (q != absl::string_view::npos) {
    for (absl::string_view pair : absl::StrSplit(target.substr(q + 1), '&', absl::SkipEmpty())) {
      size_t eq = pair.find('=');
      std::string key, value;
      if (!Decode(pair.substr(0, eq), &key) ||
          !Decode(eq == absl::string_view::npos ? absl::string_view() : pair.substr(eq + 1), &value)) {
        return Bad(400, "a broken percent-escape in the query");
      }
      p.request.query[key] = value;
    }
  }
  if (lines.size() - 1 > kMaxHeaders) return Bad(431, absl::StrCat("more than ", kMaxHeaders, " headers"));
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos || !IsToken(line.substr(0, colon))) return Bad(400, "a malformed header line");
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    for (char c : value) {
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) return Bad(400, "a control character in a header");
    }
    p.request.headers[absl::AsciiStrToLower(line.substr(0, colon))] = std::string(value);
  }
  if (p.request.headers.count("transfer-encoding") > 0 ||
      (p.request.headers.count("content-length") > 0 && p.request.headers["content-length"] != "0")) {
    return Bad(413, "requests here carry no body");
  }
  p.state = HttpParse::kComplete;
  return p;
}

std::string SerializeHttpResponse(const HttpResponse& r, bool head_only) {
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ", HttpStatusText(r.status), "\r\nContent-Type: ",
                                 r.content_type, "\r\nContent-Length: ", r.body.size(),
                                 "\r\nConnection: close\r\nCache-Control: no-store\r\n"
                                 "X-Content-Type-Options: nosniff\r\n");
  for (const auto& [name, value] : r.headers) absl::StrAppend(&out, name, ": ", value, "\r\n");
  out += "\r\n";
  if (!head_only) out += r.body;
  return out;
}

}  // namespace gpupool::runtime
