#include "checkpoint/snapshot_file.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpupool::checkpoint {
namespace {

constexpr char kHeaderMagic[8] = {'G', 'P', 'U', 'P', 'C', 'K', 'P', 'T'};
constexpr char kFooterMagic[8] = {'G', 'P', 'C', 'K', 'E', 'N', 'D', '1'};
constexpr uint32_t kFormat = 1;
// Large enough that write() and the hash run at full speed, small enough to stay in L2/L3 between
// hashing a chunk and writing it.
constexpr size_t kChunkBytes = 4 << 20;

static_assert(std::endian::native == std::endian::little, "the snapshot format is little-endian");

template <typename T>
void Put(std::byte* at, T value) {
  std::memcpy(at, &value, sizeof(T));
}
template <typename T>
T Get(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

std::span<const std::byte> AsBytes(absl::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

}  // namespace

absl::StatusOr<uint64_t> WriteSnapshotFile(WritableFile& file, uint64_t version, int64_t step,
                                           absl::string_view metadata,
                                           std::span<const std::span<const std::byte>> pieces) {
  if (metadata.size() > kMaxMetadataBytes) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot metadata is ", metadata.size(),
                                                   " bytes; at most ", kMaxMetadataBytes));
  }
  std::byte header[kSnapshotHeaderBytes];
  std::memcpy(header, kHeaderMagic, 8);
  Put<uint32_t>(header + 8, kFormat);
  Put<uint32_t>(header + 12, kSnapshotHeaderBytes);
  Put<uint64_t>(header + 16, version);
  Put<int64_t>(header + 24, step);
  Put<uint64_t>(header + 32, metadata.size());

  Checksummer hash;
  hash.Update(header);
  hash.Update(AsBytes(metadata));
  if (absl::Status s = file.Append(header); !s.ok()) return s;
  if (absl::Status s = file.Append(AsBytes(metadata)); !s.ok()) return s;
  uint64_t payload_bytes = 0;
  for (std::span<const std::byte> piece : pieces) {
    payload_bytes += piece.size();
    while (!piece.empty()) {
      std::span<const std::byte> chunk = piece.first(std::min(piece.size(), kChunkBytes));
      hash.Update(chunk);
      if (absl::Status s = file.Append(chunk); !s.ok()) return s;
      piece = piece.subspan(chunk.size());
    }
  }
  std::byte footer[kSnapshotFooterBytes];
  Put<uint64_t>(footer, payload_bytes);
  hash.Update(std::span<const std::byte>(footer, 8));
  const uint64_t checksum = hash.Digest();
  Put<uint64_t>(footer + 8, checksum);
  std::memcpy(footer + 16, kFooterMagic, 8);
  if (absl::Status s = file.Append(footer); !s.ok()) return s;
  return checksum;
}

SnapshotReader::SnapshotReader(std::unique_ptr<ReadableFile> file,
                               std::unique_ptr<Checksummer> hash)
    : file_(std::move(file)), hash_(std::move(hash)) {}
SnapshotReader::~SnapshotReader() = default;

absl::StatusOr<std::unique_ptr<SnapshotReader>> SnapshotReader::Open(
    std::unique_ptr<ReadableFile> file, std::string path) {
  auto damaged = [&path](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("snapshot ", path, " is damaged: ", why));
  };
  absl::StatusOr<uint64_t> size = file->Size();
  if (!size.ok()) return size.status();
  if (*size < kSnapshotHeaderBytes + kSnapshotFooterBytes) {
    return damaged(absl::StrCat("only ", *size, " bytes long (truncated)"));
  }
  std::byte header[kSnapshotHeaderBytes];
  if (absl::Status s = file->ReadAt(0, header); !s.ok()) return s;
  if (std::memcmp(header, kHeaderMagic, 8) != 0) return damaged("bad header magic");
  if (Get<uint32_t>(header + 8) != kFormat || Get<uint32_t>(header + 12) != kSnapshotHeaderBytes) {
    return damaged(absl::StrCat("unknown format ", Get<uint32_t>(header + 8)));
  }
  std::byte footer[kSnapshotFooterBytes];
  if (absl::Status s = file->ReadAt(*size - kSnapshotFooterBytes, footer); !s.ok()) return s;
  if (std::memcmp(footer + 16, kFooterMagic, 8) != 0) {
    return damaged("no footer (truncated or never finished)");
  }
  const uint64_t metadata_bytes = Get<uint64_t>(header + 32);
  const uint64_t payload_bytes = Get<uint64_t>(footer);
  const uint64_t body = *size - kSnapshotHeaderBytes - kSnapshotFooterBytes;
  if (metadata_bytes > kMaxMetadataBytes || metadata_bytes > body ||
      payload_bytes != body - metadata_bytes) {
    return damaged(absl::StrCat("sizes do not add up: ", metadata_bytes, " metadata + ",
                                payload_bytes, " payload bytes in a ", *size, "-byte file"));
  }

  auto hash = std::make_unique<Checksummer>();
  hash->Update(header);
  std::string metadata(metadata_bytes, '\0');
  if (absl::Status s = file->ReadAt(kSnapshotHeaderBytes,
                                    std::as_writable_bytes(std::span(metadata.data(), metadata.size())));
      !s.ok()) {
    return s;
  }
  hash->Update(AsBytes(metadata));

  std::unique_ptr<SnapshotReader> reader(new SnapshotReader(std::move(file), std::move(hash)));
  reader->info_ = SnapshotInfo{.version = Get<uint64_t>(header + 16),
                               .step = Get<int64_t>(header + 24),
                               .metadata = std::move(metadata),
                               .payload_bytes = payload_bytes,
                               .checksum = Get<uint64_t>(footer + 8),
                               .path = std::move(path)};
  return reader;
}

absl::Status SnapshotReader::ReadPayload(
    absl::FunctionRef<void(uint64_t offset, std::span<const std::byte>)> sink) {
  std::vector<std::byte> chunk(std::min<uint64_t>(kChunkBytes, std::max<uint64_t>(info_.payload_bytes, 1)));
  const uint64_t start = kSnapshotHeaderBytes + info_.metadata.size();
  for (uint64_t done = 0; done < info_.payload_bytes;) {
    std::span<std::byte> piece(chunk.data(), std::min<uint64_t>(chunk.size(), info_.payload_bytes - done));
    if (absl::Status s = file_->ReadAt(start + done, piece); !s.ok()) return s;
    hash_->Update(piece);
    sink(done, piece);
    done += piece.size();
  }
  std::byte length[8];
  Put<uint64_t>(length, info_.payload_bytes);
  hash_->Update(length);
  const uint64_t actual = hash_->Digest();
  if (actual != info_.checksum) {
    return absl::DataLossError(absl::StrCat("snapshot ", info_.path,
                                            " is damaged: checksum mismatch (footer says ",
                                            absl::Hex(info_.checksum), ", content hashes to ",
                                            absl::Hex(actual), ")"));
  }
  return absl::OkStatus();
}

}  // namespace gpupool::checkpoint
