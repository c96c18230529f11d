// File: runtime/objects/lineage.h
//
// How to make an object again: the remote function that produced it, its encoded arguments and
// its task options. A ref that leaves its rank while its task is pending or running carries its
// lineage, so when the owner dies before the object is fetched, the reader runs the task again
// itself instead of losing the object (Ray's lineage reconstruction, for one level: arguments
// that are themselves refs are not followed, so such tasks carry no lineage). It also names the
// checkpoint key the task snapshots under in its owner, so a checkpointable task run again
// resumes from the owner's last committed snapshot when the checkpoint directory is shared
// (every rank of a job on one machine, or a directory the nodes mount), instead of from step 0.
#ifndef GPUPOOL_RUNTIME_OBJECTS_LINEAGE_H_
#define GPUPOOL_RUNTIME_OBJECTS_LINEAGE_H_

#include <string>
#include <string_view>

#include "gpupool/task_options.h"

namespace gpupool::runtime {

struct Lineage {
  std::string function;  // its registered name (GPUPOOL_REMOTE)
  std::string args;      // as the task got them
  TaskOptions options;
  std::string checkpoint_key;  // the owner's key for the task's snapshots (maybe none exist)
};

std::string EncodeLineage(const Lineage& lineage);
// Throws gpupool::Error(kDataLoss) naming what was malformed.
Lineage DecodeLineage(std::string_view bytes);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_OBJECTS_LINEAGE_H_
