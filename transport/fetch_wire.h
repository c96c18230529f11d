// File: transport/fetch_wire.h
//
// The active-message headers of object transfer (object_transfer.h) and of the receipts that let
// a sender free what it sent (runtime/objects/object_exchange.h), and their strict decoding. A header comes from another process, so decoding trusts nothing: sizes are checked
// against the bytes present and against bounds, and anything else is InvalidArgument saying what
// was wrong. Fields are fixed-width in the host's byte order (every platform gpupool targets,
// x86-64 and aarch64, is little-endian); a magic word carries the format's version.
//
//   request  "GPF2" | u32 id_size | u64 request_id | u32 key_size | key bytes | id bytes
//   reply    "GPR1" | u32 status code | u64 request_id | u64 object_size | u32 message_size |
//            message bytes            (the object itself is the AM payload, not in the header)
//   receipt  "GPK1" | u32 key_size | i32 rank | u64 object_id | key bytes
#ifndef GPUPOOL_TRANSPORT_FETCH_WIRE_H_
#define GPUPOOL_TRANSPORT_FETCH_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpupool::transport {

// Bytes of a request header besides the object id and the access key.
inline constexpr size_t kFetchRequestFixedBytes = 20;
// Longest access key a request may carry (the job's key: 32 hex characters).
inline constexpr size_t kMaxAccessKeyBytes = 64;
// Longest error message a reply carries (longer ones are cut).
inline constexpr size_t kMaxReplyMessageBytes = 512;

struct FetchRequest {
  uint64_t request_id = 0;
  absl::string_view access_key;  // what the fetcher presents (ObjectServer checks it); may be empty
  absl::string_view object_id;   // both point into the decoded header
};

struct FetchReply {
  uint64_t request_id = 0;
  absl::Status status;  // the owner's answer: OK, or why it does not serve the object
  uint64_t object_size = 0;
};

// `access_key` of at most kMaxAccessKeyBytes (the caller checks).
std::string EncodeFetchRequest(uint64_t request_id, absl::string_view object_id,
                               absl::string_view access_key = {});
// InvalidArgument unless `header` is exactly one request with an id of at most `max_id_bytes`
// and a key of at most kMaxAccessKeyBytes.
absl::StatusOr<FetchRequest> DecodeFetchRequest(absl::string_view header, size_t max_id_bytes);

std::string EncodeFetchReply(uint64_t request_id, const absl::Status& status,
                             uint64_t object_size);
absl::StatusOr<FetchReply> DecodeFetchReply(absl::string_view header);

// Rank `rank` has resolved one receipt of a ref to `object_id` (fetched it, failed to, or found it
// already there): its sender need not keep the object for that receipt any more.
struct ObjectReceipt {
  absl::string_view access_key;  // points into the decoded header
  int32_t rank = 0;
  uint64_t object_id = 0;
};
// `access_key` of at most kMaxAccessKeyBytes (the caller checks).
std::string EncodeObjectReceipt(const ObjectReceipt& receipt);
// InvalidArgument unless `header` is exactly one receipt with a key of at most kMaxAccessKeyBytes.
absl::StatusOr<ObjectReceipt> DecodeObjectReceipt(absl::string_view header);

// Compares without an early exit, so the time taken says nothing about how much of a key matched.
bool SameAccessKey(absl::string_view a, absl::string_view b);

}  // namespace gpupool::transport

#endif  // GPUPOOL_TRANSPORT_FETCH_WIRE_H_
