#include "checkpoint/snapshot_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/directory_backend.h"
#include "checkpoint/manifest.h"
#include "checkpoint/task_key.h"
#include "tests/checkpoint/test_dir.h"

namespace gpupool::checkpoint {
namespace {

using ::testing::HasSubstr;
using testing::Bytes;
using testing::CapturedWarnings;
using testing::CaptureInto;
using testing::Pattern;
namespace fs = std::filesystem;

class SnapshotStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTestDir("store"); }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<SnapshotStore> OpenStore(int keep_last = 3) {
    auto backend = NewLocalDirectoryBackend({.root = dir_.string()});
    EXPECT_TRUE(backend.ok()) << backend.status();
    auto store = SnapshotStore::Open({.backend = std::move(*backend),
                                      .keep_last = keep_last,
                                      .warning_sink = CaptureInto(warnings_)});
    EXPECT_TRUE(store.ok()) << store.status();
    return std::move(*store);
  }

  std::vector<std::string> SnapshotFiles(const std::string& task) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_ / task)) {
      if (ParseSnapshotFileName(e.path().filename().string())) {
        names.push_back(e.path().filename().string());
      }
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
  std::shared_ptr<CapturedWarnings> warnings_ = std::make_shared<CapturedWarnings>();
};

TEST_F(SnapshotStoreTest, WritesPiecesAndLoadsTheirConcatenationWithStepAndMetadata) {
  auto store = OpenStore();
  std::vector<std::byte> a = Pattern(1000, 1), b = Pattern(5 << 20, 2), empty;
  std::span<const std::byte> pieces[] = {a, empty, b};
  absl::StatusOr<SnapshotInfo> written = store->Write("job-1.task-1", 42, "lr=0.1", pieces);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->version, 1u);
  EXPECT_EQ(written->payload_bytes, a.size() + b.size());

  absl::StatusOr<LoadedSnapshot> loaded = store->Load("job-1.task-1");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->result.info.step, 42);
  EXPECT_EQ(loaded->result.info.metadata, "lr=0.1");
  EXPECT_EQ(loaded->result.info.version, 1u);
  EXPECT_TRUE(loaded->result.warnings.empty());
  std::vector<std::byte> expected = a;
  expected.insert(expected.end(), b.begin(), b.end());
  EXPECT_EQ(loaded->payload, expected);
}

// Snapshots hold a task's state: only the job's user may read them. (Tests run as root here, so
// the modes are what is checked, not a refused read.)
TEST_F(SnapshotStoreTest, TaskDirectoriesAndSnapshotsArePrivateToTheirUser) {
  auto store = OpenStore();
  std::vector<std::byte> a = Pattern(4096, 3);
  std::span<const std::byte> pieces[] = {a};
  ASSERT_TRUE(store->Write("job-1.task-9", 1, "", pieces).ok());
  ASSERT_TRUE(store->Write("job-1.task-9", 2, "", pieces).ok());
  EXPECT_EQ(fs::status(dir_ / "job-1.task-9").permissions() & fs::perms::all, fs::perms::owner_all);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "job-1.task-9")) {
    ++files;
    EXPECT_EQ(e.status().permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write)
        << e.path();
  }
  EXPECT_GE(files, 3) << "two snapshots and the manifest";
}

TEST_F(SnapshotStoreTest, LoadIntoScattersThePayloadOverTheBuffers) {
  auto store = OpenStore();
  std::vector<std::byte> a = Pattern(7, 1), b = Pattern(9 << 20, 2), c = Pattern(3, 3);
  std::span<const std::byte> pieces[] = {a, b, c};
  ASSERT_TRUE(store->Write("t", 5, "", pieces).ok());

  std::vector<std::byte> x(7), y(9 << 20), z(3);
  std::span<std::byte> buffers[] = {x, y, z};
  absl::StatusOr<LoadResult> r = store->LoadInto("t", buffers);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->info.step, 5);
  EXPECT_EQ(x, a);
  EXPECT_EQ(y, b);
  EXPECT_EQ(z, c);
}

TEST_F(SnapshotStoreTest, LoadIntoBuffersOfTheWrongSizeIsFailedPreconditionNamingBothSizes) {
  auto store = OpenStore();
  std::vector<std::byte> a = Pattern(100, 1);
  std::span<const std::byte> pieces[] = {a};
  ASSERT_TRUE(store->Write("t", 1, "", pieces).ok());
  std::vector<std::byte> small(99);
  std::span<std::byte> buffers[] = {small};
  absl::Status s = store->LoadInto("t", buffers).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("holds 100 payload bytes"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("hold 99"));
}

TEST_F(SnapshotStoreTest, NewestWinsAndOnlyKeepLastAreKept) {
  auto store = OpenStore(/*keep_last=*/2);
  for (int step = 1; step <= 5; ++step) {
    std::vector<std::byte> p = Pattern(1000, step);
    std::span<const std::byte> pieces[] = {p};
    ASSERT_TRUE(store->Write("t", step * 10, "", pieces).ok());
  }
  EXPECT_THAT(SnapshotFiles("t"), ::testing::ElementsAre(SnapshotFileName(4), SnapshotFileName(5)));
  auto loaded = store->Load("t");
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->result.info.step, 50);
  EXPECT_EQ(loaded->payload, Pattern(1000, 5));
  auto listed = store->List("t");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].step, 50);
  EXPECT_EQ((*listed)[1].step, 40);
}

TEST_F(SnapshotStoreTest, ANewStoreContinuesTheVersionsOnDisk) {
  std::vector<std::byte> p = Pattern(10, 1);
  std::span<const std::byte> pieces[] = {p};
  ASSERT_TRUE(OpenStore()->Write("t", 1, "", pieces).ok());
  ASSERT_TRUE(OpenStore()->Write("t", 2, "", pieces).ok());
  auto reopened = OpenStore();
  auto w = reopened->Write("t", 3, "", pieces);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->version, 3u);
  EXPECT_EQ(reopened->Load("t")->result.info.step, 3);
}

TEST_F(SnapshotStoreTest, TasksAreIndependent) {
  auto store = OpenStore();
  std::vector<std::byte> a = Pattern(10, 1), b = Pattern(20, 2);
  std::span<const std::byte> pa[] = {a}, pb[] = {b};
  ASSERT_TRUE(store->Write("a", 1, "", pa).ok());
  ASSERT_TRUE(store->Write("b", 2, "", pb).ok());
  EXPECT_EQ(store->Load("a")->payload, a);
  EXPECT_EQ(store->Load("b")->payload, b);
  ASSERT_TRUE(store->Remove("a").ok());
  EXPECT_EQ(store->Load("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Load("b")->payload, b);
  EXPECT_FALSE(fs::exists(dir_ / "a"));
}

TEST_F(SnapshotStoreTest, LoadingATaskWithNoSnapshotIsNotFoundNamingTheTask) {
  auto store = OpenStore();
  absl::Status s = store->Load("never-written").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("never-written"));
}

TEST_F(SnapshotStoreTest, BadTaskKeysAreRefusedNamingTheKey) {
  auto store = OpenStore();
  std::vector<std::byte> p = Pattern(10, 1);
  std::span<const std::byte> pieces[] = {p};
  for (std::string key : {std::string("a/b"), std::string(".."), std::string("x..y"),
                          std::string(""), std::string(".hidden"), std::string(300, 'k'),
                          std::string("tab\there"), std::string("back\\slash")}) {
    absl::Status s = store->Write(key, 1, "", pieces).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(std::string(s.message()), HasSubstr("checkpoint task key")) << key;
    EXPECT_EQ(store->Load(key).status().code(), absl::StatusCode::kInvalidArgument) << key;
  }
  EXPECT_THAT(std::string(ValidateTaskKey("a/b").message()), HasSubstr("\"a/b\""));
  EXPECT_THAT(std::string(ValidateTaskKey("a/b").message()), HasSubstr("contains '/'"));
  EXPECT_TRUE(ValidateTaskKey("job-3.task-17:attempt@2").ok());
  EXPECT_TRUE(ValidateTaskKey(std::string(kMaxTaskKeyBytes, 'k')).ok());
}

TEST_F(SnapshotStoreTest, BadOptionsAreRefusedNamingWhatIsWrong) {
  auto backend = NewLocalDirectoryBackend({.root = dir_.string()});
  ASSERT_TRUE(backend.ok());
  absl::Status zero = SnapshotStore::Open({.backend = std::move(*backend), .keep_last = 0}).status();
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(zero.message()), HasSubstr("keep_last is 0"));

  absl::Status null = SnapshotStore::Open({.backend = nullptr}).status();
  EXPECT_EQ(null.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(null.message()), HasSubstr("backend"));

  std::ofstream((dir_ / "plain-file").string()) << "x";
  absl::Status not_dir = NewLocalDirectoryBackend({.root = (dir_ / "plain-file").string()}).status();
  EXPECT_EQ(not_dir.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(not_dir.message()), HasSubstr("plain-file"));
  EXPECT_THAT(std::string(not_dir.message()), HasSubstr("not a directory"));

  absl::Status missing =
      NewLocalDirectoryBackend({.root = (dir_ / "absent").string(), .create_if_missing = false})
          .status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("absent"));

  EXPECT_EQ(NewSharedDirectoryBackend({.root = ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(NewLocalDirectoryBackend({.root = (dir_ / "new" / "deep").string()}).ok());
  EXPECT_TRUE(fs::is_directory(dir_ / "new" / "deep"));
}

TEST_F(SnapshotStoreTest, ForeignEntriesInTheDirectoriesAreLeftAlone) {
  std::ofstream((dir_ / "notes.txt").string()) << "not a task";
  fs::create_directories(dir_ / ".hidden");
  std::ofstream((dir_ / ".hidden" / "x.tmp.1.0").string()) << "not ours either";
  auto store = OpenStore();
  std::vector<std::byte> p = Pattern(10, 1);
  std::span<const std::byte> pieces[] = {p};
  ASSERT_TRUE(store->Write("t", 1, "", pieces).ok());
  std::ofstream((dir_ / "t" / "README").string()) << "a stray file in a task directory";
  ASSERT_TRUE(store->Write("t", 2, "", pieces).ok());
  EXPECT_EQ(store->Load("t")->result.info.step, 2);
  EXPECT_TRUE(fs::exists(dir_ / "notes.txt"));
  EXPECT_TRUE(fs::exists(dir_ / ".hidden" / "x.tmp.1.0"));
  EXPECT_TRUE(fs::exists(dir_ / "t" / "README"));
  EXPECT_TRUE(warnings_->Take().empty());
}

TEST_F(SnapshotStoreTest, OversizedMetadataIsInvalidArgument) {
  auto store = OpenStore();
  std::string metadata(kMaxMetadataBytes + 1, 'm');
  absl::Status s = store->Write("t", 1, metadata, {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("metadata"));
  EXPECT_EQ(store->Load("t").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SnapshotStoreTest, SharedBackendWritesHostQualifiedTempsAndReadsBackTheSame) {
  auto backend = NewSharedDirectoryBackend({.root = dir_.string()});
  ASSERT_TRUE(backend.ok());
  std::string suffix = (*backend)->TempSuffix();
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string host_part(host);
  std::replace(host_part.begin(), host_part.end(), '.', '_');
  EXPECT_THAT(suffix, HasSubstr(host_part));
  EXPECT_THAT(suffix, HasSubstr(std::to_string(::getpid())));

  auto store = SnapshotStore::Open({.backend = std::move(*backend)});
  ASSERT_TRUE(store.ok());
  std::vector<std::byte> p = Pattern(4096, 9);
  std::span<const std::byte> pieces[] = {p};
  ASSERT_TRUE((*store)->Write("t", 9, "m", pieces).ok());
  // A second store over the same directory (another node, in effect) sees it.
  auto other = SnapshotStore::Open(
      {.backend = *NewSharedDirectoryBackend({.root = dir_.string()})});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->Load("t")->payload, p);
}

}  // namespace
}  // namespace gpupool::checkpoint
