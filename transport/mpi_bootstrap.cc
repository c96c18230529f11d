#include "transport/mpi_bootstrap.h"

#include <mpi.h>

#include <cstdlib>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace gpupool::transport {

bool LaunchedByMpi() {
  // Open MPI's mpirun, any PMIx launcher (Open MPI 4/5, Slurm's srun --mpi=pmix), MPICH's Hydra.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<MpiBootstrap>> MpiBootstrap::Start() {
  std::unique_ptr<MpiBootstrap> b(new MpiBootstrap());
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) return absl::FailedPreconditionError("MPI was already finalised in this process");
  if (!initialized) {
    int provided = 0;
    if (int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided); rc != MPI_SUCCESS) {
      return absl::UnavailableError(absl::StrCat("MPI_Init_thread failed (error ", rc, ")"));
    }
    b->owns_mpi_ = true;
  }
  // Errors come back as codes instead of aborting every rank.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &b->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &b->size_);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  b->host_.assign(name, static_cast<size_t>(length));
  return b;
}

MpiBootstrap::~MpiBootstrap() { Finish(); }

void MpiBootstrap::Finish() {
  if (finished_) return;
  finished_ = true;
  if (owns_mpi_ && !peer_lost_) MPI_Finalize();
}

absl::Status MpiBootstrap::Check(int rc, absl::string_view what) const {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  return absl::UnavailableError(absl::StrCat(what, " failed on rank ", rank_, ": ",
                                             absl::string_view(text, static_cast<size_t>(length))));
}

absl::StatusOr<std::vector<std::string>> MpiBootstrap::AllGather(absl::string_view mine) {
  if (finished_) return absl::FailedPreconditionError("MPI bootstrap already finished");
  // Every rank checks every size, so an oversized contribution fails on all ranks alike instead
  // of leaving some waiting in the second collective.
  int my_size = mine.size() > kMaxBootstrapMessageBytes ? -1 : static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<size_t>(size_));
  if (absl::Status s = Check(MPI_Allgather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD),
                             "MPI_Allgather of sizes");
      !s.ok()) {
    return s;
  }
  std::vector<int> offsets(sizes.size());
  int64_t total = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    if (sizes[r] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, " contributed more than ",
                                                     kMaxBootstrapMessageBytes, " bytes to a bootstrap exchange"));
    }
    offsets[r] = static_cast<int>(total);
    total += sizes[r];
  }
  if (total > static_cast<int64_t>(kMaxBootstrapMessageBytes) * 4) {
    return absl::InvalidArgumentError(absl::StrCat("bootstrap exchange of ", total, " bytes is too large"));
  }
  std::string all(static_cast<size_t>(total), '\0');
  if (absl::Status s = Check(MPI_Allgatherv(mine.data(), my_size, MPI_CHAR, all.data(), sizes.data(),
                                            offsets.data(), MPI_CHAR, MPI_COMM_WORLD),
                             "MPI_Allgatherv");
      !s.ok()) {
    return s;
  }
  std::vector<std::string> out;
  out.reserve(sizes.size());
  for (size_t r = 0; r < sizes.size(); ++r) out.push_back(all.substr(offsets[r], sizes[r]));
  return out;
}

absl::StatusOr<std::string> MpiBootstrap::Broadcast(absl::string_view mine, int root) {
  if (finished_) return absl::FailedPreconditionError("MPI bootstrap already finished");
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is not a rank (size ", size_, ")"));
  }
  int64_t length = static_cast<int64_t>(mine.size());
  if (absl::Status s = Check(MPI_Bcast(&length, 1, MPI_INT64_T, root, MPI_COMM_WORLD), "MPI_Bcast of the size");
      !s.ok()) {
    return s;
  }
  if (length < 0 || length > static_cast<int64_t>(kMaxBootstrapMessageBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast of ", length, " bytes is too large"));
  }
  std::string out = rank_ == root ? std::string(mine) : std::string(static_cast<size_t>(length), '\0');
  if (absl::Status s = Check(MPI_Bcast(out.data(), static_cast<int>(length), MPI_CHAR, root, MPI_COMM_WORLD),
                             "MPI_Bcast");
      !s.ok()) {
    return s;
  }
  return out;
}

absl::Status MpiBootstrap::Barrier() {
  if (finished_) return absl::FailedPreconditionError("MPI bootstrap already finished");
  return Check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

}  // namespace gpupool::transport
