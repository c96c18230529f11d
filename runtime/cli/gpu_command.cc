// `gpupool gpu drain|resume|repaired NODE/GPU` and `gpupool node drain|resume NODE`: an operator's
// word on a running head's GPUs (like `scontrol update nodename=... state=drain reason=...`),
// with the operators' token. The head journals each with who said it and why.
//
//   gpupool gpu drain node-0/1 --reason "fan noise" --pool 127.0.0.1:7070 --token-file ops.token
//   gpupool gpu repaired node-0/1 --reason "board swapped"   # quarantined until it passes
//   gpupool node resume node-0
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/cli/command.h"
#include "runtime/cli/head_address.h"
#include "runtime/client/gpu_operations.h"

namespace gpupool::cli {
namespace {

struct OperateFlags {
  HeadFlags head;
  std::string target;  // NODE/GPU or NODE
  std::string reason;
  std::string as;      // who, for the journal
};

std::string Operator(const OperateFlags& flags) {
  if (!flags.as.empty()) return flags.as;
  const char* user = std::getenv("USER");
  return user != nullptr && *user != '\0' ? user : "operator";
}

void Run(const OperateFlags& flags, const std::string& action, bool whole_node) {
  runtime::GpuOperation op{.action = action, .reason = flags.reason, .who = Operator(flags)};
  if (whole_node) {
    if (flags.target.empty() || flags.target.find('/') != std::string::npos) {
      throw CommandFailed(absl::StrCat("expected a node name like node-0, got '", flags.target,
                                       "' (for one GPU: gpupool gpu ", action, " NODE/GPU)"));
    }
    op.node = flags.target;
  } else {
    const size_t slash = flags.target.rfind('/');
    if (slash == std::string::npos || slash == 0 ||
        !absl::SimpleAtoi(flags.target.substr(slash + 1), &op.gpu) || op.gpu < 0) {
      throw CommandFailed(absl::StrCat("expected NODE/GPU like node-0/1, got '", flags.target,
                                       "' (for a whole node: gpupool node ", action, " NODE)"));
    }
    op.node = flags.target.substr(0, slash);
  }
  if (action == "drain" && flags.reason.empty()) {
    throw CommandFailed("a drain needs a reason: --reason TEXT (it is shown with the GPU and journaled)");
  }
  HeadAddress head = ResolveHead(flags.head);
  absl::StatusOr<std::string> report = runtime::OperateHeadGpus(head.host, head.port, head.token, op);
  if (!report.ok()) throw CommandFailed(std::string(report.status().message()));
  std::cout << *report << "\n";
}

void AddOperation(CLI::App* parent, const std::string& action, const std::string& help, bool whole_node) {
  auto flags = std::make_shared<OperateFlags>();
  CLI::App* c = parent->add_subcommand(action, help);
  c->add_option("target", flags->target, whole_node ? "NODE" : "NODE/GPU (the GPU's index on its node)")->required();
  c->add_option("--reason", flags->reason, action == "drain" ? "why (required; shown and journaled)" : "why (journaled)");
  c->add_option("--as", flags->as, "who you are, for the journal (default: $USER)");
  AddHeadFlags(c, flags->head);
  c->callback([flags, action, whole_node] { Run(*flags, action, whole_node); });
}

}  // namespace

void RegisterGpuCommands(CLI::App& app) {
  CLI::App* gpu = app.add_subcommand("gpu", "Drain, resume or vouch for the repair of one GPU (operators' token)");
  gpu->require_subcommand(1);
  AddOperation(gpu, "drain", "No new leases on the GPU; its leases are revoked with their grace; held until resumed", false);
  AddOperation(gpu, "resume", "Return a drained or quarantined GPU to service now (not a failed one: see repaired)", false);
  AddOperation(gpu, "repaired", "The GPU was fixed: quarantine it until it passes its diagnostics again", false);
  CLI::App* node = app.add_subcommand("node", "Drain or resume every GPU of a node (operators' token)");
  node->require_subcommand(1);
  AddOperation(node, "drain", "Drain every GPU of the node", true);
  AddOperation(node, "resume", "Resume every GPU of the node", true);
}

}  // namespace gpupool::cli
