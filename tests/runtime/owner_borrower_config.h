// File: tests/runtime/owner_borrower_config.h
//
// The smallest pool configuration with a reclaim in it: team `owner` has one H100 of nominal
// quota, team `borrower` none but may borrow one; class `training` is preemptible with a 120 s
// grace period. Tests of leases, revocation and the lease protocol share it.
#ifndef GPUPOOL_TESTS_RUNTIME_OWNER_BORROWER_CONFIG_H_
#define GPUPOOL_TESTS_RUNTIME_OWNER_BORROWER_CONFIG_H_

namespace gpupool::runtime {

inline constexpr char kOwnerBorrowerConfig[] = R"(
model_groups:
  gpus: [H100-80GB]
priority_classes:
  - {name: training, value: 500, preemptible: true, grace_period_s: 120, checkpoint_interval_s: 600}
teams:
  - name: owner
    quotas: [{gpus: gpus, nominal: 1}]
  - name: borrower
    quotas: [{gpus: gpus, nominal: 0, borrowing_limit: 1}]
)";

}  // namespace gpupool::runtime

#endif  // GPUPOOL_TESTS_RUNTIME_OWNER_BORROWER_CONFIG_H_
