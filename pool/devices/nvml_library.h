// File: pool/devices/nvml_library.h
//
// How NvidiaDriver reaches the NVIDIA libraries without linking them: dlopen of NVML
// (libnvidia-ml.so.1) and the CUDA driver (libcuda.so.1), the dlsym lookups that fill
// nvml::NvmlApi, and the mapping of NVML's return codes to absl::Status. Nothing here initialises
// NVML or keeps state; the caller owns every handle returned and closes it with dlclose.
//
//   nvml::NvmlApi api;
//   absl::StatusOr<void*> library = nvidia_internal::LoadNvmlLibrary(path, api);
//   if (!library.ok()) return library.status();  // kUnavailable, naming the path
//   nvml::nvmlReturn_t r = api.nvmlInit_v2();     // required symbols are never null
//   ... nvidia_internal::Call(api.nvmlDeviceGetMigMode, device, &current, &pending) ...
//
// Internal to the NVIDIA driver: its source files use it, and nvidia_driver.h includes it for
// CudaDeviceFacts only.
// Thread-safety: the functions are thread-safe; dlopen and dlsym are.
#ifndef GPUPOOL_POOL_DEVICES_NVML_LIBRARY_H_
#define GPUPOOL_POOL_DEVICES_NVML_LIBRARY_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pool/devices/nvml_api.h"

namespace gpupool::pool::nvidia_internal {

// The library NvidiaDriver::Open() loads: `configured` when non-empty, else $GPUPOOL_NVML_LIBRARY
// when set and non-empty, else "libnvidia-ml.so.1".
std::string NvmlLibraryPath(absl::string_view configured);

// Whether the library at `path` can be loaded (RTLD_LAZY; closed again at once).
bool LibraryLoadable(const std::string& path);

// Loads NVML from `path` and fills `api`: the five symbols needed to open (init, shutdown, error
// strings, device count, handle by index) are required, every other entry is left null when the
// library lacks it. Returns the dlopen handle, which the caller closes. kUnavailable when the
// library cannot be loaded (the message names `path` and carries dlerror's text) or lacks a
// required symbol. Does not call nvmlInit.
absl::StatusOr<void*> LoadNvmlLibrary(const std::string& path, nvml::NvmlApi& api);

// What the CUDA driver reports for one device it enumerates.
struct CudaDeviceFacts {
  std::string pci_bus_id;  // as CUDA writes it: "0000:1B:00.0"
  int sm_count = 0;
  int cc_major = 0;
  int cc_minor = 0;
};

// Loads the CUDA driver from `path` (empty: "libcuda.so.1"), initialises it, and appends the
// facts of every device it enumerates to `devices`; a device whose bus id or SM count cannot be
// read is skipped. Returns the dlopen handle, or null when the library cannot be loaded, which is
// not an error: the SM counts are then unknown. A library that loads but cannot initialise is
// still returned (with nothing appended). It is loaded RTLD_NODELETE, so it stays mapped after
// dlclose.
void* LoadCudaLibrary(const std::string& path, std::vector<CudaDeviceFacts>& devices);

// An NVML result as a Status: OK for NVML_SUCCESS; kPermissionDenied for NO_PERMISSION;
// kNotFound for NOT_FOUND; kFailedPrecondition for what the hardware refuses in its current state
// (IN_USE, INSUFFICIENT_RESOURCES, NOT_SUPPORTED, RESET_REQUIRED); kInvalidArgument for
// INVALID_ARGUMENT; kUnavailable when the GPU or driver cannot be reached (GPU_IS_LOST,
// DRIVER_NOT_LOADED, UNINITIALIZED, LIB_RM_VERSION_MISMATCH, TIMEOUT); kUnimplemented for
// FUNCTION_NOT_FOUND (the installed driver lacks the call); kInternal otherwise. The message is
// "<call>: <error_text> (NVML error <code>)".
absl::Status NvmlResultToStatus(int result, absl::string_view call, absl::string_view error_text);

// NVML's own text for `result` (nvmlErrorString); empty when it has none.
std::string NvmlErrorText(const nvml::NvmlApi& api, nvml::nvmlReturn_t result);

// Calls an optional NVML entry point. A missing one answers FUNCTION_NOT_FOUND, so "the installed
// driver is too old" is handled like any other unsupported query: the field stays unknown.
template <typename Fn, typename... Args>
nvml::nvmlReturn_t Call(Fn fn, Args... args) {
  if (fn == nullptr) return nvml::NVML_ERROR_FUNCTION_NOT_FOUND;
  return fn(args...);
}

// The text of a fixed-size buffer NVML or CUDA filled; a missing terminator does not run past
// the end.
std::string FromBuffer(const char* buffer, size_t size);

}  // namespace gpupool::pool::nvidia_internal

#endif  // GPUPOOL_POOL_DEVICES_NVML_LIBRARY_H_
