// File: runtime/rpc/lease_codec.h
//
// Converts the scheduler's lease types (pool::LeaseRequest, pool::Lease, pool::RevokeCause) and
// absl::Status to and from their wire form in runtime/rpc/pool_service.capnp. Decoding treats
// the message as untrusted: an out-of-range enum or an over-long field is an InvalidArgument
// error naming the field, never a crash. Used by the pool server and the remote pool client only;
// KJ and Cap'n Proto types stay behind this adapter (STYLE 9).
#ifndef GPUPOOL_RUNTIME_RPC_LEASE_CODEC_H_
#define GPUPOOL_RUNTIME_RPC_LEASE_CODEC_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pool/scheduler/scheduler.h"
#include "runtime/rpc/pool_service.capnp.h"

namespace gpupool::rpc {

// Upper bounds on what one message may carry; the server's ReaderOptions bound the whole message.
inline constexpr size_t kMaxTextBytes = 4096;   // an id, a team, a label
inline constexpr size_t kMaxListEntries = 256;  // models, labels
inline constexpr uint64_t kMaxMessageWords = 1 << 17;  // 1 MiB: traversal limit per message

void EncodeLeaseRequest(const pool::LeaseRequest& r, LeaseRequest::Builder out);
absl::StatusOr<pool::LeaseRequest> DecodeLeaseRequest(LeaseRequest::Reader in);
void EncodeLease(const pool::Lease& l, Lease::Builder out);
absl::StatusOr<pool::Lease> DecodeLease(Lease::Reader in);
// A lease as one self-contained byte string (a Cap'n Proto message), as the head's journal keeps
// it so a restarted head can take the lease back. Decoding checks as above, and refuses bytes
// that are not a whole message (InvalidArgument).
std::string LeaseToBytes(const pool::Lease& l);
absl::StatusOr<pool::Lease> LeaseFromBytes(absl::string_view bytes);
// A queued request likewise, as the journal keeps it so a restarted head queues it again.
std::string LeaseRequestToBytes(const pool::LeaseRequest& r);
absl::StatusOr<pool::LeaseRequest> LeaseRequestFromBytes(absl::string_view bytes);
RevokeCause EncodeRevokeCause(pool::RevokeCause cause);
pool::RevokeCause DecodeRevokeCause(RevokeCause cause);  // unknown values read as kReclaim
void EncodeStatus(const absl::Status& s, Status::Builder out);
absl::Status DecodeStatus(Status::Reader in);

}  // namespace gpupool::rpc

#endif  // GPUPOOL_RUNTIME_RPC_LEASE_CODEC_H_
