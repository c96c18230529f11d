#include "gpupool/version.h"

namespace gpupool {

const char* Version() { return GPUPOOL_VERSION_STRING; }

}  // namespace gpupool
