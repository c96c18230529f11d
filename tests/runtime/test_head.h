// File: tests/runtime/test_head.h
//
// A head for RPC tests: an PoolService over simulated GPUs of one node, served by a PoolServer on
// 127.0.0.1, with the teams of `config` (kOwnerBorrowerConfig unless told otherwise).
#ifndef GPUPOOL_TESTS_RUNTIME_TEST_HEAD_H_
#define GPUPOOL_TESTS_RUNTIME_TEST_HEAD_H_

#include <map>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "runtime/service/pool_service.h"
#include "pool/devices/driver_selection.h"
#include "pool/scheduler/lease_request.h"
#include "runtime/service/pool_server.h"
#include "runtime/rpc/node_codec.h"
#include "tests/runtime/owner_borrower_config.h"

namespace gpupool::runtime {

// The general form. Null (with a test failure) when the head cannot start.
inline std::unique_ptr<PoolServer> StartHead(const PoolServiceOptions& pool_options,
                                             const PoolServerOptions& server_options) {
  auto pool = PoolService::Start(pool_options);
  EXPECT_TRUE(pool.ok()) << pool.status();
  if (!pool.ok()) return nullptr;
  auto server = PoolServer::Start(*std::move(pool), server_options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// `gpus` as --simulate takes it ("1xH100-80GB"); `port` 0: any.
inline std::unique_ptr<PoolServer> StartHead(const std::string& gpus, std::map<std::string, std::string> tokens,
                                             uint16_t port = 0, const char* config = kOwnerBorrowerConfig) {
  PoolServiceOptions o;
  o.pool.simulate = gpus;
  o.config_text = config;
  PoolServerOptions so;
  so.port = port;
  so.team_tokens = std::move(tokens);
  return StartHead(o, so);
}

// What `spec` ("2xH100-80GB") looks like to a node's own driver, named as the pool knows it: a
// remote node for a head, or what its agent registers.
inline rpc::DiscoveredPool SimulatedNode(const std::string& name, const std::string& spec = "2xH100-80GB") {
  auto selected = pool::SelectDriver(pool::DriverChoice{.driver = "simulated", .simulation_spec = spec});
  EXPECT_TRUE(selected.ok()) << selected.status();
  auto nodes = selected->driver->Discover();
  EXPECT_TRUE(nodes.ok() && nodes->size() == 1);
  rpc::DiscoveredPool p{"simulated", {(*nodes)[0]}};
  p.nodes[0].name = name;
  return p;
}

// A request for one whole GPU with id `id`, for `team` ("": the session's own).
inline pool::LeaseRequest Req(const std::string& id, const std::string& team = "") {
  pool::LeaseRequest r;
  r.id = id;
  r.team = team;
  return r;
}

}  // namespace gpupool::runtime

#endif  // GPUPOOL_TESTS_RUNTIME_TEST_HEAD_H_
