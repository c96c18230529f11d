// File: transport/mpi_bootstrap.h
//
// MPI as gpupool uses it: for bootstrap only (DESIGN §3 "mpirun job"). When a program is started
// by `mpirun`, the ranks learn who they are and exchange a few strings (the head's address, each
// rank's node description, UCX worker addresses); after that, control goes over Cap'n Proto and
// data over UCX/NCCL, and MPI is never called again. That is what lets one rank die without
// taking the others down: Open MPI 4.1 has no ULFM, so an MPI call after a peer's death may hang
// or abort, and the ranks must be launched with `--enable-recovery` for the survivors to live on.
//
//   if (transport::LaunchedByMpi()) {
//     auto mpi = transport::MpiBootstrap::Start();        // MPI_Init (once per process)
//     auto all = (*mpi)->AllGather(my_address);           // every rank's string, by rank
//     ...
//     (*mpi)->Finish();   // MPI_Finalize, at the end of bootstrap or of the program
//   }
//
// Thread-compatible: one thread at a time. The process may initialise MPI only once (an MPI rule),
// so Start after Finish fails.
#ifndef GPUPOOL_TRANSPORT_MPI_BOOTSTRAP_H_
#define GPUPOOL_TRANSPORT_MPI_BOOTSTRAP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpupool::transport {

// Whether the launcher that started this process is an MPI one (Open MPI, PMIx, MPICH/Hydra),
// read from the environment without calling MPI: a program run by hand stays MPI-free.
bool LaunchedByMpi();

// Largest string one rank may contribute to a collective: bootstrap messages are small (a node
// description, an address); a bigger one is refused before any rank allocates for it.
inline constexpr size_t kMaxBootstrapMessageBytes = 16 << 20;

class MpiBootstrap {
 public:
  // Initialises MPI (MPI_THREAD_FUNNELED) unless the program already did, in which case the
  // program keeps ownership and Finish does not finalise.
  static absl::StatusOr<std::unique_ptr<MpiBootstrap>> Start();
  ~MpiBootstrap();  // Finish(), unless a peer was reported lost

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The processor name MPI reports for this rank (the host it runs on).
  const std::string& host() const { return host_; }

  // Every rank's `mine`, indexed by rank. Collective: every rank must call it.
  absl::StatusOr<std::vector<std::string>> AllGather(absl::string_view mine);
  // `mine` on `root`, returned on every rank. Collective.
  absl::StatusOr<std::string> Broadcast(absl::string_view mine, int root);
  absl::Status Barrier();

  // Tells the bootstrap that a peer has died: MPI must not be called again, not even to
  // finalise (it would hang waiting for the dead rank).
  void PeerLost() { peer_lost_ = true; }
  // MPI_Finalize (when this object initialised MPI and no peer was lost). Idempotent.
  void Finish();

 private:
  MpiBootstrap() = default;
  absl::Status Check(int rc, absl::string_view what) const;

  int rank_ = 0;
  int size_ = 1;
  std::string host_;
  bool owns_mpi_ = false;
  bool finished_ = false;
  bool peer_lost_ = false;
};

}  // namespace gpupool::transport

#endif  // GPUPOOL_TRANSPORT_MPI_BOOTSTRAP_H_
