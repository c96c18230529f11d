#include "checkpoint/durable_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

namespace gpupool::checkpoint {
namespace {

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s)); }

class DurableFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gpupool_durable_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(DurableFileTest, WritesReplacesAndLeavesNoTemporaryFiles) {
  std::string path = (dir_ / "manifest").string();
  ASSERT_TRUE(WriteFileDurably(path, Bytes("first")).ok());
  ASSERT_TRUE(WriteFileDurably(path, Bytes("second version")).ok());
  EXPECT_EQ(*ReadWholeFile(path), "second version");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST_F(DurableFileTest, FailedWriteKeepsTheOldContentAndNamesThePath) {
  std::string path = (dir_ / "manifest").string();
  ASSERT_TRUE(WriteFileDurably(path, Bytes("committed")).ok());
  // A read-only directory refuses the temporary file: the committed file must survive.
  if (::geteuid() == 0) {
    // root ignores directory permissions; use a path whose directory does not exist instead.
    absl::Status s = WriteFileDurably((dir_ / "missing" / "manifest").string(), Bytes("x"));
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("missing/manifest"));
  } else {
    ::chmod(dir_.c_str(), 0500);
    absl::Status s = WriteFileDurably(path, Bytes("lost"));
    ::chmod(dir_.c_str(), 0700);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(*ReadWholeFile(path), "committed");
}

TEST_F(DurableFileTest, ReadingAMissingFileIsNotFound) {
  EXPECT_EQ(ReadWholeFile((dir_ / "nope").string()).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpupool::checkpoint
