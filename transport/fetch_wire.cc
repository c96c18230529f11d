#include "transport/fetch_wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace gpupool::transport {
namespace {

constexpr char kRequestMagic[4] = {'G', 'P', 'F', '2'};
constexpr char kReplyMagic[4] = {'G', 'P', 'R', '1'};
constexpr char kReceiptMagic[4] = {'G', 'P', 'K', '1'};
constexpr size_t kReceiptFixed = 4 + 4 + 4 + 8;
constexpr size_t kRequestFixed = kFetchRequestFixedBytes;  // magic, id size, request id, key size
constexpr size_t kReplyFixed = 4 + 4 + 8 + 8 + 4;

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

template <typename T>
T Get(absl::string_view in, size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(value));
  return value;
}

absl::Status Malformed(absl::string_view what, absl::string_view detail) {
  return absl::InvalidArgumentError(absl::StrCat("malformed ", what, ": ", detail));
}

// The checks both headers start with: the fixed part is present and the magic is right.
absl::Status CheckPrefix(absl::string_view header, const char (&magic)[4], size_t fixed,
                         absl::string_view what) {
  if (header.size() < fixed) {
    return Malformed(what, absl::StrCat(header.size(), " bytes, need at least ", fixed));
  }
  if (std::memcmp(header.data(), magic, sizeof(magic)) != 0) return Malformed(what, "bad magic");
  return absl::OkStatus();
}

}  // namespace

std::string EncodeFetchRequest(uint64_t request_id, absl::string_view object_id,
                               absl::string_view access_key) {
  std::string out(kRequestMagic, sizeof(kRequestMagic));
  Put<uint32_t>(out, static_cast<uint32_t>(object_id.size()));
  Put<uint64_t>(out, request_id);
  Put<uint32_t>(out, static_cast<uint32_t>(access_key.size()));
  out.append(access_key.data(), access_key.size());
  out.append(object_id.data(), object_id.size());
  return out;
}

absl::StatusOr<FetchRequest> DecodeFetchRequest(absl::string_view header, size_t max_id_bytes) {
  if (absl::Status s = CheckPrefix(header, kRequestMagic, kRequestFixed, "fetch request");
      !s.ok()) {
    return s;
  }
  uint32_t id_size = Get<uint32_t>(header, 4);
  if (id_size > max_id_bytes) {
    return Malformed("fetch request", absl::StrCat("object id of ", id_size,
                                                   " bytes, at most ", max_id_bytes));
  }
  uint32_t key_size = Get<uint32_t>(header, 16);
  if (key_size > kMaxAccessKeyBytes) {
    return Malformed("fetch request", absl::StrCat("access key of ", key_size, " bytes, at most ",
                                                   kMaxAccessKeyBytes));
  }
  if (header.size() != kRequestFixed + key_size + id_size) {
    return Malformed("fetch request", absl::StrCat(header.size(), " bytes for an id of ", id_size,
                                                   " and a key of ", key_size));
  }
  return FetchRequest{Get<uint64_t>(header, 8), header.substr(kRequestFixed, key_size),
                      header.substr(kRequestFixed + key_size)};
}

std::string EncodeFetchReply(uint64_t request_id, const absl::Status& status,
                             uint64_t object_size) {
  absl::string_view message = status.message().substr(0, kMaxReplyMessageBytes);
  std::string out(kReplyMagic, sizeof(kReplyMagic));
  Put<uint32_t>(out, static_cast<uint32_t>(status.code()));
  Put<uint64_t>(out, request_id);
  Put<uint64_t>(out, object_size);
  Put<uint32_t>(out, static_cast<uint32_t>(message.size()));
  out.append(message.data(), message.size());
  return out;
}

absl::StatusOr<FetchReply> DecodeFetchReply(absl::string_view header) {
  if (absl::Status s = CheckPrefix(header, kReplyMagic, kReplyFixed, "fetch reply"); !s.ok()) {
    return s;
  }
  uint32_t code = Get<uint32_t>(header, 4);
  uint32_t message_size = Get<uint32_t>(header, 24);
  if (code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return Malformed("fetch reply", absl::StrCat("status code ", code));
  }
  if (message_size > kMaxReplyMessageBytes || header.size() != kReplyFixed + message_size) {
    return Malformed("fetch reply", absl::StrCat(header.size(), " bytes for a message of ",
                                                 message_size));
  }
  FetchReply reply;
  reply.request_id = Get<uint64_t>(header, 8);
  reply.object_size = Get<uint64_t>(header, 16);
  if (code != 0) {
    reply.status = absl::Status(static_cast<absl::StatusCode>(code),
                                header.substr(kReplyFixed, message_size));
  }
  return reply;
}

std::string EncodeObjectReceipt(const ObjectReceipt& receipt) {
  std::string out(kReceiptMagic, sizeof(kReceiptMagic));
  Put<uint32_t>(out, static_cast<uint32_t>(receipt.access_key.size()));
  Put<int32_t>(out, receipt.rank);
  Put<uint64_t>(out, receipt.object_id);
  out.append(receipt.access_key.data(), receipt.access_key.size());
  return out;
}

absl::StatusOr<ObjectReceipt> DecodeObjectReceipt(absl::string_view header) {
  if (absl::Status s = CheckPrefix(header, kReceiptMagic, kReceiptFixed, "object receipt"); !s.ok()) return s;
  uint32_t key_size = Get<uint32_t>(header, 4);
  if (key_size > kMaxAccessKeyBytes) {
    return Malformed("object receipt",
                     absl::StrCat("access key of ", key_size, " bytes, at most ", kMaxAccessKeyBytes));
  }
  if (header.size() != kReceiptFixed + key_size) {
    return Malformed("object receipt", absl::StrCat(header.size(), " bytes for a key of ", key_size));
  }
  return ObjectReceipt{header.substr(kReceiptFixed, key_size), Get<int32_t>(header, 8), Get<uint64_t>(header, 12)};
}

bool SameAccessKey(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ |= static_cast<unsigned char>(a[i] ^ b[i]);
  return differ == 0;
}

}  // namespace gpupool::transport
