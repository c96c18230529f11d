// File: tests/runtime/http_client.h
//
// A plain HTTP/1.1 client over a POSIX socket for tests of the head's HTTP endpoint: send bytes
// (well-formed or not), read until the server closes, split status, headers and body.
#ifndef GPUPOOL_TESTS_RUNTIME_HTTP_CLIENT_H_
#define GPUPOOL_TESTS_RUNTIME_HTTP_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace gpupool::runtime {

// A connected socket to 127.0.0.1:port with a 10 s receive timeout; -1 when it cannot connect.
inline int ConnectLoopback(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Everything the server sends until it closes (or 10 s of silence).
inline std::string ReadAll(int fd) {
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

struct HttpReply {
  int status = 0;  // 0: no status line came back
  std::string head;
  std::string body;
};

inline HttpReply ParseReply(const std::string& raw) {
  HttpReply r;
  size_t end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return r;
  r.status = std::stoi(raw.substr(9, 3));
  r.head = raw.substr(0, end);
  r.body = raw.substr(end + 4);
  return r;
}

// Sends `bytes` as they are, says that is all, and returns the parsed answer.
inline HttpReply SendRaw(uint16_t port, const std::string& bytes) {
  int fd = ConnectLoopback(port);
  if (fd < 0) return {};
  (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);  // nothing more comes: the server need not wait for the rest
  HttpReply r = ParseReply(ReadAll(fd));
  close(fd);
  return r;
}

// GET `path`, with `token` as a bearer token unless empty.
inline HttpReply Get(uint16_t port, const std::string& path, const std::string& token = "") {
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n";
  if (!token.empty()) req += "Authorization: Bearer " + token + "\r\n";
  return SendRaw(port, req + "\r\n");
}

}  // namespace gpupool::runtime

#endif  // GPUPOOL_TESTS_RUNTIME_HTTP_CLIENT_H_
