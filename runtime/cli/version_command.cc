// `gpupool version`: the library version and what the data plane can use on this machine.
#include <iostream>

#include "absl/strings/str_join.h"
#include "gpupool/version.h"
#include "runtime/cli/command.h"
#include "transport/transport_capabilities.h"
#include <nlohmann/json.hpp>

namespace gpupool::cli {
namespace {

void RunVersion(bool json) {
  absl::StatusOr<transport::TransportCapabilities> caps = transport::QueryTransportCapabilities();
  if (!caps.ok()) throw CommandFailed(std::string(caps.status().message()));
  if (json) {
    std::cout << nlohmann::json{
                     {"gpupool", Version()},
                     {"ucx", {{"version", caps->ucx.version},
                              {"memory_types", caps->ucx.memory_types},
                              {"moves_cuda_memory", caps->ucx.moves_cuda_memory}}},
                     {"nccl", caps->nccl_version},
                     {"mpi", {{"library", caps->mpi_library},
                              {"standard", std::to_string(caps->mpi_version_major) + "." +
                                               std::to_string(caps->mpi_version_minor)}}},
                     {"cuda", {{"runtime", caps->cuda_runtime_version},
                               {"devices", caps->cuda_devices},
                               {"status", caps->cuda_status}}},
                 }.dump(2)
              << "\n";
    return;
  }
  std::cout << "gpupool " << Version() << "\n"
            << "  UCX   " << caps->ucx.version << " (memory types: "
            << absl::StrJoin(caps->ucx.memory_types, ", ")
            << ")"
            << "\n"
            << "  NCCL  " << caps->nccl_version << " (DeviceBuffer collectives on real whole GPUs)\n"
            << "  MPI   " << caps->mpi_library << " (MPI " << caps->mpi_version_major << "."
            << caps->mpi_version_minor << ")\n"
            << "  CUDA  runtime " << caps->cuda_runtime_version << ", " << caps->cuda_devices
            << " device(s)" << (caps->cuda_status.empty() ? "" : " (" + caps->cuda_status + ")")
            << "\n";
}

}  // namespace

void RegisterVersionCommand(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("version", "Show versions and what UCX/NCCL/MPI/CUDA offer here");
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([json] { RunVersion(*json); });
}

}  // namespace gpupool::cli
