// File: tests/checkpoint/test_dir.h
//
// A fresh directory per test under the system temp directory, removed afterwards, and a warning
// sink that keeps what it was told so tests can assert on warnings.
#ifndef GPUPOOL_TESTS_CHECKPOINT_TEST_DIR_H_
#define GPUPOOL_TESTS_CHECKPOINT_TEST_DIR_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/snapshot_store.h"

namespace gpupool::checkpoint::testing {

inline std::filesystem::path MakeTestDir(const std::string& tag) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("gpupool_" + tag + "_" + std::to_string(::getpid()) + "_" +
                               info->test_suite_name() + "_" + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Thread-safe: the async writer's threads warn too. Shared by the sink and the test, hence
// shared_ptr (the sink may outlive the test's reference in a store it was moved into).
struct CapturedWarnings {
  std::mutex mu;
  std::vector<std::string> lines;
  std::vector<std::string> Take() {
    std::lock_guard<std::mutex> lock(mu);
    return std::move(lines);
  }
};

inline WarningSink CaptureInto(std::shared_ptr<CapturedWarnings> captured) {
  return [captured](absl::string_view w) {
    std::lock_guard<std::mutex> lock(captured->mu);
    captured->lines.emplace_back(w);
  };
}

inline std::vector<std::byte> Pattern(size_t bytes, uint64_t seed) {
  std::vector<std::byte> out(bytes);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<std::byte>(x);
  }
  return out;
}

inline std::span<const std::byte> Bytes(const std::vector<std::byte>& v) { return v; }

}  // namespace gpupool::checkpoint::testing

#endif  // GPUPOOL_TESTS_CHECKPOINT_TEST_DIR_H_
