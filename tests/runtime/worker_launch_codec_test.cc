// WorkerLaunch on the wire (runtime/rpc/worker_launch_codec.h): what goes in comes out, and what
// would be cut short or misread by an exec is refused, naming the field.
#include <string>

#include <capnp/message.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/worker_launch_codec.h"

namespace gpupool::rpc {
namespace {

using ::testing::HasSubstr;

runtime::WorkerLaunch Sample() {
  return runtime::WorkerLaunch{.node = "node-1", .job = "job-7", .executable = "/opt/app/train",
                               .args = {"--epochs", "3", ""}, .cwd = "/work",
                               .env = {{"A", "1"}, {"PYTHONPATH", "/x:/y"}}, .secret = "k3y"};
}

absl::StatusOr<runtime::WorkerLaunch> RoundTrip(const runtime::WorkerLaunch& in) {
  capnp::MallocMessageBuilder message;
  auto builder = message.initRoot<WorkerLaunch>();
  EncodeWorkerLaunch(in, builder);
  return DecodeWorkerLaunch(builder.asReader());
}

TEST(WorkerLaunchCodec, EveryFieldSurvivesTheWire) {
  absl::StatusOr<runtime::WorkerLaunch> out = RoundTrip(Sample());
  ASSERT_TRUE(out.ok()) << out.status();
  const runtime::WorkerLaunch want = Sample();
  EXPECT_EQ(out->node, want.node);
  EXPECT_EQ(out->job, want.job);
  EXPECT_EQ(out->executable, want.executable);
  EXPECT_EQ(out->args, want.args);
  EXPECT_EQ(out->cwd, want.cwd);
  EXPECT_EQ(out->env, want.env);
  EXPECT_EQ(out->secret, want.secret);
}

TEST(WorkerLaunchCodec, WhatAnExecWouldMisreadIsRefused) {
  {
    // Our encoder cannot write one (it reads C strings), a hostile peer can.
    capnp::MallocMessageBuilder message;
    auto builder = message.initRoot<WorkerLaunch>();
    EncodeWorkerLaunch(Sample(), builder);
    const std::string nul("3\0--evil", 8);
    builder.getArgs().set(1, capnp::Text::Reader(nul.data(), nul.size()));
    EXPECT_THAT(DecodeWorkerLaunch(builder.asReader()).status().message(),
                HasSubstr("launch.args[1] holds a NUL byte"));
  }

  runtime::WorkerLaunch eq_name = Sample();
  eq_name.env = {{"A=B", "1"}};
  EXPECT_THAT(RoundTrip(eq_name).status().message(), HasSubstr("launch.env[0].name 'A=B' is empty or holds '='"));

  runtime::WorkerLaunch long_secret = Sample();
  long_secret.secret.assign(kMaxTextBytes + 1, 'x');
  EXPECT_THAT(RoundTrip(long_secret).status().message(), HasSubstr("launch.secret is 4097 bytes"));

  runtime::WorkerLaunch many = Sample();
  many.args.assign(kMaxWorkerArgs + 1, "a");
  EXPECT_EQ(RoundTrip(many).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpupool::rpc
