// File: runtime/tasks/job_proof.cc
#include "runtime/tasks/job_proof.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gpupool::runtime {
namespace {

constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;  // SHA-256

// Each field with its length first, so no two different field lists sign the same bytes.
void Field(std::string& out, std::string_view field) {
  const uint64_t n = field.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.append(field);
}

}  // namespace

absl::StatusOr<std::string> FreshNonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) != 1) {
    return absl::UnavailableError("the kernel's random generator gave no bytes for a nonce");
  }
  return nonce;
}

std::string JobProof(std::string_view key, ProofRole role, std::string_view job, std::string_view worker_nonce,
                     std::string_view driver_nonce) {
  std::string message;
  Field(message, role == ProofRole::kDriver ? "gpupool driver" : "gpupool worker");
  Field(message, job);
  Field(message, worker_nonce);
  Field(message, driver_nonce);
  unsigned char out[kProofBytes];
  size_t out_len = 0;
  if (EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, key.data(), key.size(),
                reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, sizeof(out),
                &out_len) == nullptr ||
      out_len != kProofBytes) {
    return std::string();  // never equal to a real proof (ProofHolds refuses an empty one)
  }
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

bool ProofHolds(std::string_view proof, std::string_view key, ProofRole role, std::string_view job,
                std::string_view worker_nonce, std::string_view driver_nonce) {
  const std::string want = JobProof(key, role, job, worker_nonce, driver_nonce);
  return !want.empty() && proof.size() == want.size() && CRYPTO_memcmp(proof.data(), want.data(), want.size()) == 0;
}

}  // namespace gpupool::runtime
