// File: tests/runtime/die_rank_flag.h
//
// The mpirun test programs' --die-rank=K flag: rank K kills itself (SIGKILL) at a point the
// program chooses, so the test can check what the surviving ranks do. -1 when absent.
#ifndef GPUPOOL_TESTS_RUNTIME_DIE_RANK_FLAG_H_
#define GPUPOOL_TESTS_RUNTIME_DIE_RANK_FLAG_H_

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

inline int DieRankFlag(int argc, char** argv) {
  int die_rank = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--die-rank=", 11) == 0) die_rank = std::atoi(argv[i] + 11);
  }
  return die_rank;
}

// Prints "rank R dying" (which the death tests look for) and kills this process.
[[noreturn]] inline void DieNow(int rank) {
  std::printf("rank %d dying\n", rank);
  std::fflush(stdout);
  raise(SIGKILL);
  std::abort();
}

#endif  // GPUPOOL_TESTS_RUNTIME_DIE_RANK_FLAG_H_
