#include "runtime/rpc/inventory_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <vector>

namespace gpupool::rpc {
namespace {

// Every field ForEachField lists, as "path=value" lines: a field added to the records and their
// field list but not to the wire shows up as a difference below.
template <typename Record>
void Flatten(const Record& record, const std::string& prefix, std::vector<std::string>* out) {
  ForEachField(record, [&](const char* name, const auto& value) {
    using T = std::decay_t<decltype(value)>;
    std::string path = prefix + name;
    if constexpr (requires { typename T::value_type; } && !std::is_same_v<T, std::string>) {
      if constexpr (kHasFields<typename T::value_type>) {
        for (size_t i = 0; i < value.size(); ++i) {
          Flatten(value[i], path + "[" + std::to_string(i) + "].", out);
        }
      } else {
        for (const auto& item : value) out->push_back(path + "+=" + ::testing::PrintToString(item));
      }
    } else {
      out->push_back(path + "=" + ::testing::PrintToString(value));
    }
  });
}

TEST(InventoryCodec, CarriesEveryFieldOfTheDescription) {
  const char* root = std::getenv("GPUPOOL_SOURCE_DIR");
  PoolDescription pool = DescribePool({.config_path = std::string(root) + "/examples/pool.yaml"});
  pool.nodes[0].gpus[1].health = HealthState::kDraining;
  pool.nodes[0].gpus[1].health_reasons = {"XID 48"};
  absl::StatusOr<PoolDescription> back = DecodeInventory(EncodeInventory(pool));
  ASSERT_TRUE(back.ok()) << back.status();
  std::vector<std::string> sent;
  std::vector<std::string> received;
  Flatten(pool, "", &sent);
  Flatten(*back, "", &received);
  ASSERT_EQ(received.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(received[i], sent[i]);
}

TEST(InventoryCodec, RoundTripsEveryField) {
  const char* root = std::getenv("GPUPOOL_SOURCE_DIR");
  PoolDescription pool = DescribePool({.config_path = std::string(root) + "/examples/pool.yaml"});
  pool.nodes[0].gpus[1].health = HealthState::kDraining;
  pool.nodes[0].gpus[1].health_reasons = {"XID 48"};
  std::string bytes = EncodeInventory(pool);
  absl::StatusOr<PoolDescription> back = DecodeInventory(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->nodes.size(), pool.nodes.size());
  EXPECT_EQ(back->driver, "simulated");
  for (size_t n = 0; n < pool.nodes.size(); ++n) {
    EXPECT_EQ(back->nodes[n].name, pool.nodes[n].name);
    EXPECT_EQ(back->nodes[n].labels, pool.nodes[n].labels);
    ASSERT_EQ(back->nodes[n].gpus.size(), pool.nodes[n].gpus.size());
    for (size_t g = 0; g < pool.nodes[n].gpus.size(); ++g) {
      const GpuInfo& a = pool.nodes[n].gpus[g];
      const GpuInfo& b = back->nodes[n].gpus[g];
      EXPECT_EQ(a.uuid, b.uuid);
      EXPECT_EQ(a.model, b.model);
      EXPECT_EQ(a.memory_mib, b.memory_mib);
      EXPECT_EQ(a.mig_mode, b.mig_mode);
      EXPECT_EQ(a.health, b.health);
      EXPECT_EQ(a.health_reasons, b.health_reasons);
      EXPECT_EQ(a.labels, b.labels);
      EXPECT_EQ(a.price_per_hour, b.price_per_hour);
      ASSERT_EQ(a.instances.size(), b.instances.size());
      for (size_t i = 0; i < a.instances.size(); ++i) {
        EXPECT_EQ(a.instances[i].profile, b.instances[i].profile);
        EXPECT_EQ(a.instances[i].start, b.instances[i].start);
        EXPECT_EQ(a.instances[i].compute_instances.size(), b.instances[i].compute_instances.size());
      }
    }
  }
}

TEST(InventoryCodec, GarbageIsRefusedNotCrashed) {
  EXPECT_EQ(DecodeInventory("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeInventory("not eight").status().code(), absl::StatusCode::kInvalidArgument);
  // A segment table claiming far more data than present.
  std::string bogus("\x00\x00\x00\x00\xff\xff\xff\x0f", 8);
  bogus += std::string(8, 'x');
  absl::StatusOr<PoolDescription> r = DecodeInventory(bogus);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("malformed inventory"));
  // Truncating a real message anywhere never crashes.
  std::string real = EncodeInventory(DescribePool({.simulate = "2xA100-40GB"}));
  for (size_t cut = 8; cut < real.size(); cut += 8) {
    (void)DecodeInventory(real.substr(0, cut));
  }
}


// A 584-byte registration that the agent fuzz test (PoolRpcFuzz.DamagedAgentSessions..., seed 1)
// found: its pointers share data, so it read as a huge inventory and held the head's loop for
// seconds. Traversal is now bounded by the message's own size, so it is refused instead.
TEST(InventoryCodec, AMessageWhosePointersShareDataIsRefused) {
  const std::string hex =
      "000000004800000000000000000002000500000052000000090000001f00000073696d756c6174656400000000000000"
      "0400000000000300090000001a000000090000000700000009000042d0b7b8006e310000000000000000000000000200"
      "08000000050008000000000009000100973e010000000000840000000000000000000000ffffffff0000000000000000"
      "510000005200000055000000b20000005d0000004a0100007100000007000000710000002a000000710000008a000000"
      "790000000600000075000000070000000100000009000100973e010000000000840000000100000000000000ffffffff"
      "0000000000000000610000005200000065000000b20000006d0000004a0100008100000007000000810000002a000000"
      "810000008a00000089000000060000008500000007000000483130302d38304742000000000000004e56494449412048"
      "31303020383047422048424d330000004750552d64303633323165312d653336382d383361652d616536382d31363635"
      "3764633166363539000000000000000000000000010003006e766c300000000030303030303030303a31383a30302e30"
      "00000000000000000000000000000200483130302d38304742000000000000004e564944494120483130302038304742"
      "2048424d330000004750552d62306135643639652d306264342d663364622d646535652d383539346236633431623735"
      "000000000000000000000000010003006e766c300000000030303030303030303a32383a30302e300000000000000000"
      "0000000000000200";
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  ASSERT_EQ(bytes.size(), 584u);
  absl::StatusOr<PoolDescription> decoded = DecodeInventory(bytes);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << "decoded as " << (decoded.ok() ? decoded->nodes.size() : 0) << " node(s)";
}

}  // namespace
}  // namespace gpupool::rpc
