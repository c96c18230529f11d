// File: runtime/tasks/job_proof.h
//
// How a worker and its driver show each other that they hold the job's worker key without
// sending it (a challenge-response: each side's proof is an HMAC-SHA256 of both sides' fresh
// nonces under the key). The worker's Hello carries its nonce; the driver answers with its own
// nonce and its proof (wire::Challenge); the worker checks that proof before it sends its own
// (wire::Proof), which the driver checks before it says Welcome. So a process that merely listens
// where a worker was told its driver is learns nothing it could replay, and a connection that
// cannot prove the key is refused before it learns anything of the job. (The key still reaches
// the worker's agent through the head, to start it. After the handshake frames are neither
// signed nor encrypted: this proves who connected, it does not protect the connection.)
#ifndef GPUPOOL_RUNTIME_TASKS_JOB_PROOF_H_
#define GPUPOOL_RUNTIME_TASKS_JOB_PROOF_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gpupool::runtime {

// Who proves: the roles are part of what is signed, so one side's proof never passes as the other's.
enum class ProofRole { kDriver, kWorker };

// A fresh nonce: 32 random bytes (from the kernel's generator).
absl::StatusOr<std::string> FreshNonce();

// HMAC-SHA256 under `key` of the role, the job id and the worker's then the driver's nonce.
std::string JobProof(std::string_view key, ProofRole role, std::string_view job, std::string_view worker_nonce,
                     std::string_view driver_nonce);

// Whether `proof` is the one `key` gives, compared in constant time.
bool ProofHolds(std::string_view proof, std::string_view key, ProofRole role, std::string_view job,
                std::string_view worker_nonce, std::string_view driver_nonce);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_JOB_PROOF_H_
