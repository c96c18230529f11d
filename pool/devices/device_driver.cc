#include "absl/strings/string_view.h"
#include "pool/devices/device_driver.h"

namespace gpupool::pool {

absl::string_view MigModeName(MigMode mode) {
  switch (mode) {
    case MigMode::kUnsupported: return "unsupported";
    case MigMode::kDisabled: return "disabled";
    case MigMode::kEnabled: return "enabled";
  }
  return "unknown";
}

}  // namespace gpupool::pool
