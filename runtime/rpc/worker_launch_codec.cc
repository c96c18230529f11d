#include "runtime/rpc/worker_launch_codec.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/rpc/lease_codec.h"

namespace gpupool::rpc {
namespace {

// A text of at most `limit` bytes; `exec_bound`: it becomes part of an execve, where a NUL byte
// would end it early without a word.
absl::StatusOr<std::string> Text(capnp::Text::Reader t, const std::string& field, size_t limit, bool exec_bound) {
  if (t.size() > limit) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", t.size(), " bytes; at most ", limit, " are allowed"));
  }
  std::string s(t.cStr(), t.size());
  if (exec_bound && s.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, " holds a NUL byte"));
  }
  return s;
}

}  // namespace

void EncodeWorkerLaunch(const runtime::WorkerLaunch& launch, WorkerLaunch::Builder out) {
  out.setNode(launch.node);
  out.setJob(launch.job);
  out.setExecutable(launch.executable);
  auto args = out.initArgs(launch.args.size());
  for (size_t i = 0; i < launch.args.size(); ++i) args.set(i, launch.args[i]);
  out.setCwd(launch.cwd);
  auto env = out.initEnv(launch.env.size());
  size_t i = 0;
  for (const auto& [name, value] : launch.env) {
    env[i].setName(name);
    env[i++].setValue(value);
  }
  out.setSecret(launch.secret);
}

absl::StatusOr<runtime::WorkerLaunch> DecodeWorkerLaunch(WorkerLaunch::Reader in) {
  runtime::WorkerLaunch launch;
  struct Field {
    capnp::Text::Reader wire;
    const char* name;
    std::string* out;
    bool exec_bound;
  };
  for (const Field& f : {Field{in.getNode(), "launch.node", &launch.node, false},
                         Field{in.getJob(), "launch.job", &launch.job, false},
                         Field{in.getExecutable(), "launch.executable", &launch.executable, true},
                         Field{in.getCwd(), "launch.cwd", &launch.cwd, true},
                         Field{in.getSecret(), "launch.secret", &launch.secret, false}}) {
    absl::StatusOr<std::string> text = Text(f.wire, f.name, kMaxTextBytes, f.exec_bound);
    if (!text.ok()) return text.status();
    *f.out = *std::move(text);
  }
  if (in.getArgs().size() > kMaxWorkerArgs || in.getEnv().size() > kMaxWorkerArgs) {
    return absl::InvalidArgumentError(absl::StrCat("a worker takes at most ", kMaxWorkerArgs,
                                                   " arguments and as many environment variables; got ",
                                                   in.getArgs().size(), " and ", in.getEnv().size()));
  }
  for (size_t i = 0; i < in.getArgs().size(); ++i) {
    absl::StatusOr<std::string> arg =
        Text(in.getArgs()[i], absl::StrCat("launch.args[", i, "]"), kMaxWorkerArgBytes, true);
    if (!arg.ok()) return arg.status();
    launch.args.push_back(*std::move(arg));
  }
  for (size_t i = 0; i < in.getEnv().size(); ++i) {
    const std::string field = absl::StrCat("launch.env[", i, "]");
    absl::StatusOr<std::string> name = Text(in.getEnv()[i].getName(), field + ".name", kMaxTextBytes, true);
    if (!name.ok()) return name.status();
    if (name->empty() || name->find('=') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".name '", *name, "' is empty or holds '='"));
    }
    absl::StatusOr<std::string> value = Text(in.getEnv()[i].getValue(), field + ".value", kMaxWorkerArgBytes, true);
    if (!value.ok()) return value.status();
    launch.env[*std::move(name)] = *std::move(value);
  }
  return launch;
}

}  // namespace gpupool::rpc
