#include "transport/transport_capabilities.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <ucp/api/ucp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gpupool::transport {
namespace {

// ucs_memory_type_t names (ucs/memory/memory_type.h), in enum order.
constexpr const char* kMemoryTypeNames[] = {"host", "cuda", "cuda-managed", "rocm",
                                            "rocm-managed"};

}  // namespace

absl::StatusOr<UcxCapabilities> QueryUcx() {
  UcxCapabilities caps;
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  caps.version = absl::StrCat(major, ".", minor, ".", release);

  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) {
    return absl::UnavailableError(absl::StrCat("UCX: reading configuration failed: ",
                                               ucs_status_string(s)));
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AM;
  ucp_context_h context = nullptr;
  ucs_status_t s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (s != UCS_OK) {
    return absl::UnavailableError(absl::StrCat("UCX: ucp_init failed: ", ucs_status_string(s)));
  }
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  s = ucp_context_query(context, &attr);
  ucp_cleanup(context);
  if (s != UCS_OK) {
    return absl::UnavailableError(absl::StrCat("UCX: ucp_context_query failed: ",
                                               ucs_status_string(s)));
  }
  for (size_t i = 0; i < std::size(kMemoryTypeNames); ++i) {
    if (attr.memory_types & (1ull << i)) caps.memory_types.push_back(kMemoryTypeNames[i]);
  }
  caps.moves_cuda_memory = (attr.memory_types & (1ull << UCS_MEMORY_TYPE_CUDA)) != 0;
  return caps;
}

absl::StatusOr<TransportCapabilities> QueryTransportCapabilities() {
  TransportCapabilities caps;
  absl::StatusOr<UcxCapabilities> ucx = QueryUcx();
  if (!ucx.ok()) return ucx.status();
  caps.ucx = *std::move(ucx);

  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL_VERSION_CODE since 2.9: major*10000 + minor*100 + patch.
    caps.nccl_version = absl::StrCat(nccl / 10000, ".", nccl % 10000 / 100, ".", nccl % 100);
  }

  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(library, &length) == MPI_SUCCESS) {
    std::string text(library, static_cast<size_t>(length));
    caps.mpi_library = std::string(absl::StripAsciiWhitespace(
        std::vector<std::string>(absl::StrSplit(text, absl::MaxSplits(',', 1))).front()));
  }
  MPI_Get_version(&caps.mpi_version_major, &caps.mpi_version_minor);

  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) {
    caps.cuda_runtime_version = absl::StrCat(runtime / 1000, ".", runtime % 1000 / 10);
  }
  // Without a driver this returns cudaErrorInsufficientDriver, not cudaErrorNoDevice: any error
  // means "no GPU usable from CUDA".
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err == cudaSuccess) {
    caps.cuda_devices = devices;
  } else {
    caps.cuda_status = cudaGetErrorName(err);
    (void)cudaGetLastError();  // clear the sticky error for later callers
  }
  return caps;
}

}  // namespace gpupool::transport
