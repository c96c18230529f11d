// File: tests/transport/collective_checks.h
//
// The collective operations every rank of a test communicator runs, each rank checking its own
// results against values computed from the rank count (so the test process and the ucx_test_peer
// processes run the same script and each reports what it saw).
#ifndef GPUPOOL_TESTS_TRANSPORT_COLLECTIVE_CHECKS_H_
#define GPUPOOL_TESTS_TRANSPORT_COLLECTIVE_CHECKS_H_

#include <string>
#include <vector>

#include "transport/host_communicator.h"

namespace gpupool::transport::testing {

// Runs AllReduce (sum, max, min over float, double, int32, int64; a 4 MiB buffer; fewer
// elements than ranks), Broadcast (from the last rank and from rank 0) and a ring of Send/Recv.
// Returns one line per failed check; empty when every result was right.
std::vector<std::string> RunCollectiveChecks(HostCommunicator& comm);

}  // namespace gpupool::transport::testing

#endif  // GPUPOOL_TESTS_TRANSPORT_COLLECTIVE_CHECKS_H_
