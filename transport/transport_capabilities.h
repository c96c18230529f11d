// File: transport/transport_capabilities.h
//
// What the data plane can use on this machine, asked of the libraries themselves at run time:
// the UCX version and the memory types its transports can move (Debian's UCX 1.13 moves host
// memory only; a CUDA-enabled UCX adds cuda/cuda-managed: reported, not yet used to move device
// memory), the NCCL version, the MPI
// library, and how many CUDA devices the runtime sees.
//
// None of these calls needs a GPU or MPI_Init, so `gpupool version` can print them anywhere.
#ifndef GPUPOOL_TRANSPORT_TRANSPORT_CAPABILITIES_H_
#define GPUPOOL_TRANSPORT_TRANSPORT_CAPABILITIES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gpupool::transport {

struct UcxCapabilities {
  std::string version;                     // "1.13.1"
  std::vector<std::string> memory_types;   // "host", "cuda", "cuda-managed", "rocm", ...
  bool moves_cuda_memory = false;          // "cuda" in memory_types
};

struct TransportCapabilities {
  UcxCapabilities ucx;
  std::string nccl_version;        // "2.28.9"
  std::string mpi_library;         // first line of MPI_Get_library_version
  int mpi_version_major = 0;
  int mpi_version_minor = 0;
  std::string cuda_runtime_version;  // "13.0"
  int cuda_devices = 0;              // 0 when no driver or no GPU
  std::string cuda_status;           // why cuda_devices is 0, e.g. "cudaErrorInsufficientDriver"
};

// Creates and destroys a UCP context to read its attributes. Unavailable when UCX cannot start.
absl::StatusOr<UcxCapabilities> QueryUcx();

// Everything above. UCX failing is an error; the others report what they could.
absl::StatusOr<TransportCapabilities> QueryTransportCapabilities();

}  // namespace gpupool::transport

#endif  // GPUPOOL_TRANSPORT_TRANSPORT_CAPABILITIES_H_
