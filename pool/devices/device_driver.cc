#include "pool/devices/device_driver.h"

#include <unistd.h>

#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpupool::pool {

absl::string_view MigModeName(MigMode mode) {
  switch (mode) {
    case MigMode::kUnsupported: return "unsupported";
    case MigMode::kDisabled: return "disabled";
    case MigMode::kEnabled: return "enabled";
  }
  return "unknown";
}

absl::StatusOr<GpuTelemetry> DeviceDriver::ReadTelemetry(const GpuRef& gpu) {
  return absl::UnimplementedError(absl::StrCat("the ", name(), " driver reports no telemetry (GPU ", gpu.index,
                                               " of ", gpu.node, ")"));
}

std::string HostName() {
  char name[HOST_NAME_MAX + 1] = {};
  // gethostname fails only for a too-small buffer; a name is still needed to identify the node.
  if (gethostname(name, HOST_NAME_MAX) != 0 || name[0] == '\0') return "localhost";
  return std::string(name, strnlen(name, sizeof name));
}

}  // namespace gpupool::pool
