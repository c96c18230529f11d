// File: runtime/bootstrap/worker_join.cc
#include "runtime/bootstrap/worker_join.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/rpc/node_codec.h"
#include "runtime/rpc/rpc_connection.h"
#include "runtime/tasks/worker_host.h"
#include "runtime/tasks/job_proof.h"
#include "runtime/tasks/worker_protocol.h"

namespace gpupool::runtime {
namespace {

// The value of "--name=value" (or "--name value") among the args; empty when absent.
std::string FlagValue(const std::vector<std::string>& args, const std::string& name) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind(name + "=", 0) == 0) return args[i].substr(name.size() + 1);
    if (args[i] == name && i + 1 < args.size()) return args[i + 1];
  }
  return "";
}

absl::StatusOr<std::string> ReadSecret(const std::string& fd_text) {
  int fd = -1;
  if (!absl::SimpleAtoi(fd_text, &fd) || fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--gpupool-worker-secret-fd wants a file descriptor, got '", fd_text, "'"));
  }
  std::string secret;
  char buf[256];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      secret.append(buf, static_cast<size_t>(n));
      if (secret.size() > 4096) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::FailedPreconditionError(absl::StrCat("cannot read the job's secret from fd ", fd, ": ", std::strerror(errno)));
    break;
  }
  close(fd);
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) return absl::FailedPreconditionError(absl::StrCat("fd ", fd, " held no secret"));
  return secret;
}

// The output forwarders: one pipe per stream, read by a thread that sends each line.
struct Forwarder {
  int read_fd = -1;
  int saved_fd = -1;  // the stream as it was, restored when forwarding stops
  int target = -1;
  bool is_stderr = false;
  std::thread thread;
};
Forwarder forwarders[2];
FrameSocket* forward_to = nullptr;

void ForwardLoop(Forwarder* f) {
  std::string pending;
  char buf[8192];
  while (true) {
    ssize_t n = read(f->read_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0, nl;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      (void)forward_to->Send(wire::Encode(wire::Log{.is_stderr = f->is_stderr, .line = pending.substr(start, nl - start)}));
      start = nl + 1;
    }
    pending.erase(0, start);
  }
  if (!pending.empty()) (void)forward_to->Send(wire::Encode(wire::Log{.is_stderr = f->is_stderr, .line = pending}));
  close(f->read_fd);
}

}  // namespace

bool IsWorkerProcess(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--gpupool-worker") return true;
  }
  return false;
}

absl::StatusOr<WorkerJoin> JoinAsWorker(const std::vector<std::string>& args) {
  std::string driver = FlagValue(args, "--gpupool-worker-driver");
  std::string job = FlagValue(args, "--gpupool-worker-job");
  std::string node = FlagValue(args, "--gpupool-worker-node");
  std::string secret_fd = FlagValue(args, "--gpupool-worker-secret-fd");
  for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{"--gpupool-worker-driver", &driver},
                                    {"--gpupool-worker-job", &job},
                                    {"--gpupool-worker-node", &node},
                                    {"--gpupool-worker-secret-fd", &secret_fd}}) {
    if (value->empty()) return absl::InvalidArgumentError(absl::StrCat("a worker needs ", flag, " (the node's agent passes it)"));
  }
  absl::StatusOr<std::string> secret = ReadSecret(secret_fd);
  if (!secret.ok()) return secret.status();
  std::string host;
  uint16_t port = 0;
  if (absl::Status st = ParseHostPort(driver, &host, &port); !st.ok()) return st;
  absl::StatusOr<std::unique_ptr<FrameSocket>> socket = FrameSocket::Connect(host, port, std::chrono::seconds(10));
  if (!socket.ok()) return absl::Status(socket.status().code(), absl::StrCat("cannot reach the driver: ", socket.status().message()));
  // The key never crosses this connection: the driver proves it holds it, then this worker does
  // (runtime/tasks/job_proof.h). Until the driver has, its frames are small: a peer that has
  // proved nothing makes this worker hold no big buffer.
  (*socket)->SetMaxFrame(wire::kMaxHandshakeBytes);
  absl::StatusOr<std::string> nonce = FreshNonce();
  if (!nonce.ok()) return nonce.status();
  if (absl::Status st = (*socket)->Send(wire::Encode(wire::Hello{.nonce = *nonce, .job = job, .node = node,
                                                                 .pid = static_cast<int64_t>(getpid())}));
      !st.ok()) {
    return st;
  }
  absl::StatusOr<std::string> frame = (*socket)->Receive(std::chrono::seconds(30));
  if (!frame.ok()) return absl::Status(frame.status().code(), absl::StrCat("the driver did not welcome this worker: ", frame.status().message()));
  bool driver_proved = false;
  if (absl::StatusOr<wire::Kind> kind = wire::KindOf(*frame); kind.ok() && *kind == wire::Kind::kChallenge) {
    absl::StatusOr<wire::Challenge> challenge = wire::DecodeChallenge(*frame);
    if (!challenge.ok()) return challenge.status();
    if (!ProofHolds(challenge->proof, *secret, ProofRole::kDriver, job, *nonce, challenge->nonce)) {
      return absl::PermissionDeniedError(absl::StrCat("the process at ", driver, " did not prove it holds the worker key of job ",
                                                      job, ": it is not that job's driver (this worker told it nothing "
                                                      "it could use)"));
    }
    driver_proved = true;
    (*socket)->SetMaxFrame(FrameSocket::kDefaultMaxFrame);  // the job's own driver: batches may be big
    if (absl::Status st = (*socket)->Send(wire::Encode(
            wire::Proof{.proof = JobProof(*secret, ProofRole::kWorker, job, *nonce, challenge->nonce)}));
        !st.ok()) {
      return st;
    }
    frame = (*socket)->Receive(std::chrono::seconds(30));
    if (!frame.ok()) return absl::Status(frame.status().code(), absl::StrCat("the driver did not welcome this worker: ", frame.status().message()));
  }
  if (absl::StatusOr<uint64_t> protocol = wire::ProtocolOf(*frame); protocol.ok() && *protocol != wire::kProtocol) {
    return absl::FailedPreconditionError(wire::ProtocolMismatch("the driver", *protocol, "this worker"));
  }
  absl::StatusOr<wire::Welcome> welcome = wire::DecodeWelcome(*frame);
  if (!welcome.ok()) return welcome.status();
  if (!welcome->refusal.empty()) return absl::PermissionDeniedError(absl::StrCat("the driver refused this worker: ", welcome->refusal));
  // Only a driver that proved the key gets to welcome a worker (and so to send it tasks).
  if (!driver_proved) {
    return absl::PermissionDeniedError(absl::StrCat("the process at ", driver, " welcomed this worker without proving it holds "
                                                    "the worker key of job ", job, ": it is not that job's driver"));
  }
  absl::StatusOr<rpc::DiscoveredPool> gpus = rpc::DecodeNodes(welcome->node_inventory);
  if (!gpus.ok()) return gpus.status();
  if (!wire::IsWorkerObjectId(welcome->object_id_base) ||
      welcome->object_id_base > ~uint64_t{0} - (wire::kWorkerIdSpan - 1)) {
    return absl::DataLossError(absl::StrCat("the driver gave this worker object ids from ", welcome->object_id_base,
                                            ", outside the range workers' objects take"));
  }

  WorkerJoin out;
  RuntimeOptions& o = out.options;
  o.team = welcome->team;
  o.clock_speed = welcome->clock_speed;
  o.checkpoint_dir = welcome->checkpoint_dir;
  o.checkpoint_dir_shared = welcome->checkpoint_dir_shared;
  o.checkpoint_keep_last = static_cast<int>(welcome->checkpoint_keep_last);
  o.checkpoint_staging_mib = welcome->checkpoint_staging_mib;
  o.cpu_workers = 2;  // CPU tasks a worker's tasks submit; GPU work runs on the leases' threads
  out.linger = std::chrono::milliseconds(welcome->linger_ms);
  out.object_id_base = welcome->object_id_base;
  out.objects_key = welcome->objects_key;
  out.driver_on_loopback = IsLoopbackHost(host);
  out.joined.pool = std::make_unique<DriverLink>(socket->get(), welcome->pool_now_s, welcome->clock_speed);
  out.joined.local_nodes = std::move(gpus->nodes);
  out.joined.driver = welcome->driver.empty() ? gpus->driver : welcome->driver;
  out.joined.node_label = node;
  out.driver = *std::move(socket);
  return out;
}

void ForwardOutputTo(FrameSocket* driver) {
  forward_to = driver;
  for (int i = 0; i < 2; ++i) {
    Forwarder& f = forwarders[i];
    f.target = i == 0 ? STDOUT_FILENO : STDERR_FILENO;
    f.is_stderr = i == 1;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) continue;
    std::fflush(i == 0 ? stdout : stderr);
    f.saved_fd = fcntl(f.target, F_DUPFD_CLOEXEC, 3);
    dup2(p[1], f.target);
    close(p[1]);
    f.read_fd = p[0];
    f.thread = std::thread([&f] { ForwardLoop(&f); });
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);  // a line reaches the driver when it is written
}

void StopForwardingOutput() {
  std::fflush(stdout);
  std::fflush(stderr);
  for (Forwarder& f : forwarders) {
    if (!f.thread.joinable()) continue;
    // The pipe's last writer goes: the reader sees the end once it has sent what was left.
    if (f.saved_fd >= 0) dup2(f.saved_fd, f.target);
    f.thread.join();
  }
}

}  // namespace gpupool::runtime
