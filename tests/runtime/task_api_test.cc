// The task API end to end on the embedded pool over simulated GPUs: submit, dependencies, values
// of every built-in kind and a user type, errors, Wait, Put, Cancel, and a runtime that keeps
// serving after each bad input.
#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gpupool/gpupool.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;

struct Point {
  std::string label;
  std::vector<double> coords;
};

}  // namespace

template <>
struct gpupool::Codec<Point> {
  static void Encode(Writer& w, const Point& p) {
    gpupool::Encode(w, p.label);
    gpupool::Encode(w, p.coords);
  }
  static Point Decode(Reader& r) {
    Point p;
    p.label = gpupool::Decode<std::string>(r);
    p.coords = gpupool::Decode<std::vector<double>>(r);
    return p;
  }
};

namespace {

int Square(int x) { return x * x; }
int Add(int a, int b) { return a + b; }
std::string Describe(const std::map<std::string, int>& counts, const std::string& prefix) {
  std::string out = prefix;
  for (const auto& [k, v] : counts) out += k + "=" + std::to_string(v) + ";";
  return out;
}
double Norm(const Point& p) {
  double s = 0;
  for (double c : p.coords) s += c * c;
  return s;
}
int Explode(int x) {
  if (x == 13) throw std::runtime_error("unlucky number 13");
  return x;
}
void Nothing() {}
int NotRegistered(int x) { return x; }
std::atomic<bool> release_gate{false};
int Gate(int x) {
  while (!release_gate.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return x;
}
int SumRefs(const std::vector<gpupool::ObjectRef<int>>& refs) {
  int s = 0;
  for (const auto& r : refs) s += *gpupool::Get(r);
  return s;
}
std::string WhereAmI(gpupool::TaskContext& ctx) {
  if (ctx.slots().empty()) return "cpu";
  const gpupool::SlotInfo& s = ctx.slots().front();
  return s.node + "/" + std::to_string(s.gpu_index) + "/" + s.kind + "/" +
         std::to_string(ctx.memory_budget_bytes() >> 20);
}
uint64_t AllocateMiB(gpupool::TaskContext& ctx, int mib) {
  gpupool::DeviceBuffer b = ctx.Allocate(uint64_t(mib) << 20);
  return b.size();
}

GPUPOOL_REMOTE(Square);
GPUPOOL_REMOTE(Add);
GPUPOOL_REMOTE(Describe);
GPUPOOL_REMOTE(Norm);
GPUPOOL_REMOTE(Explode);
GPUPOOL_REMOTE(Nothing);
GPUPOOL_REMOTE(Gate);
GPUPOOL_REMOTE(SumRefs);
GPUPOOL_REMOTE(WhereAmI);
GPUPOOL_REMOTE(AllocateMiB);

// Holds its lease for `ms`, and says when it held it: {start, end} in steady-clock microseconds.
std::vector<int64_t> HoldFor(int ms) {
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const int64_t start = now();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return {start, now()};
}
GPUPOOL_REMOTE(HoldFor);

gpupool::RuntimeOptions TestPool() {
  gpupool::RuntimeOptions o;
  o.simulate = "4xH100-80GB";
  o.cpu_workers = 2;
  o.lease_linger_ms = 50;
  return o;
}

TEST(TaskApi, SubmitAndGet) {
  gpupool::Runtime rt = gpupool::Init(TestPool());
  gpupool::ObjectRef<int> r = gpupool::Submit(Square, 7);
  EXPECT_EQ(*gpupool::Get(r), 49);
  gpupool::ObjectRef<gpupool::Nothing> n = gpupool::Submit(Nothing);
  gpupool::Get(n);
  EXPECT_TRUE(n.ready());
}

TEST(TaskApi, ObjectRefArgumentIsADependency) {
  gpupool::Runtime rt = gpupool::Init(TestPool());
  release_gate = false;
  gpupool::ObjectRef<int> slow = gpupool::Submit(Gate, 5);
  gpupool::ObjectRef<int> sum = gpupool::Submit(Add, slow, 10);  // waits for `slow`
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(sum.ready());
  release_gate = true;
  EXPECT_EQ(*gpupool::Get(sum), 15);
}

TEST(TaskApi, StringsMapsVectorsAndUserTypesTravel) {
  gpupool::Runtime rt = gpupool::Init(TestPool());
  std::map<std::string, int> counts{{"a", 1}, {"b", 2}};
  EXPECT_EQ(*gpupool::Get(gpupool::Submit(Describe, counts, std::string("x:"))), "x:a=1;b=2;");
  EXPECT_DOUBLE_EQ(*gpupool::Get(gpupool::Submit(Norm, Point{"p", {3.0, 4.0}})), 25.0);
}

TEST(TaskApi, RefsNestedInArgumentsStayAliveUntilTheTaskRuns) {
  gpupool::Runtime rt = gpupool::Init(TestPool());
  release_gate = false;
  gpupool::ObjectRef<int> gate = gpupool::Submit(Gate, 1);
  gpupool::ObjectRef<int> total;
  {
    std::vector<gpupool::ObjectRef<int>> parts{gpupool::Put(2), gpupool::Put(3)};
    // SumRefs waits (inside the task) for `gate` via a dependency, so it runs after we drop parts.
    total = gpupool::Task(Add).Submit(gpupool::Submit(SumRefs, parts), gate);
  }
  release_gate = true;
  EXPECT_EQ(*gpupool::Get(total), 6);
}

TEST(TaskApi, ExceptionComesBackWithTaskNameWhereAndMessage) {
  gpupool::Runtime rt = gpupool::Init(TestPool());
  gpupool::ObjectRef<int> bad = gpupool::Submit(Explode, 13);
  try {
    gpupool::Get(bad);
    FAIL() << "expected a TaskError";
  } catch (const gpupool::TaskError& e) {
    EXPECT_EQ(e.task_name(), "Explode");
    EXPECT_EQ(e.location(), "cpu");
    EXPECT_EQ(e.original_message(), "unlucky number 13");
    EXPECT_THAT(e.what(), HasSubstr("task 'Explode'"));
  }
  // Tasks depending on a failed one fail too, naming the cause.
  gpupool::ObjectRef<int> downstream = gpupool::Submit(Add, bad, 1);
  EXPECT_THROW(
      {
        try {
          gpupool::Get(downstream);
        } catch (const gpupool::TaskError& e) {
          EXPECT_THAT(e.what(), HasSubstr("unlucky number 13"));
          throw;
        }
      },
      gpupool::TaskError);
  EXPECT_EQ(*gpupool::Get(gpupool::Submit(Explode, 12)), 12);  // still serving
}

TEST(TaskApi, BadInputIsRefusedClearly) {
  gpupool::Runtime rt = gpupool::Init(TestPool());
  try {
    gpupool::Submit(NotRegistered, 1);
    FAIL();
  } catch (const gpupool::Error& e) {
    EXPECT_EQ(e.code(), gpupool::ErrorCode::kNotFound);
    EXPECT_THAT(e.what(), HasSubstr("GPUPOOL_REMOTE"));
  }
  EXPECT_THROW(gpupool::Get(gpupool::ObjectRef<int>()), gpupool::Error);
  // A ref read as the wrong type names both types.
  std::string bytes;
  {
    gpupool::ObjectRef<int> value = gpupool::Put(5);
    gpupool::Writer w(bytes);
    gpupool::Encode(w, value);
    gpupool::Reader r(bytes);
    auto as_string = gpupool::Decode<gpupool::ObjectRef<std::string>>(r);
    EXPECT_THROW(gpupool::Get(as_string), gpupool::Error);
  }
  // The object is freed once its last reference went: its id is unknown now.
  gpupool::Reader r(bytes);
  try {
    gpupool::Decode<gpupool::ObjectRef<int>>(r);
    FAIL();
  } catch (const gpupool::Error& e) {
    EXPECT_EQ(e.code(), gpupool::ErrorCode::kNotFound);
    EXPECT_THAT(e.what(), HasSubstr("freed"));
  }
  // Truncated argument bytes are caught, not read past.
  std::string truncated = bytes.substr(0, 0);
  gpupool::Reader empty(truncated);
  EXPECT_THROW(gpupool::Decode<std::string>(empty), gpupool::Error);
  EXPECT_EQ(*gpupool::Get(gpupool::Submit(Square, 3)), 9);
}

TEST(TaskApi, RequestsThePoolCanNeverSatisfyFailWithItsReason) {
  gpupool::Runtime rt = gpupool::Init(TestPool());
  auto too_many = gpupool::Task(Square).Gpus(16).Submit(1);
  auto no_such_model = gpupool::Task(Square).Gpus(1).Models({"A100-80GB"}).Submit(1);
  auto isolated_fraction = gpupool::Task(Square).Gpus(0.5).HardwareIsolation().Submit(1);
  auto bad_gpus = gpupool::Task(Square).Gpus(1.5).Submit(1);
  for (auto* ref : {&too_many, &no_such_model, &isolated_fraction, &bad_gpus}) {
    try {
      gpupool::Get(*ref, std::chrono::seconds(10));
      FAIL() << "expected a refusal";
    } catch (const gpupool::TaskError& e) {
      EXPECT_NE(e.code(), gpupool::ErrorCode::kDeadlineExceeded) << e.what();
      EXPECT_FALSE(e.original_message().empty());
    }
  }
  EXPECT_EQ(*gpupool::Get(gpupool::Task(Square).Gpus(1).Submit(4)), 16);
}

TEST(TaskApi, WaitReturnsWhenEnoughAreReadyOrAtTheTimeout) {
  gpupool::Runtime rt = gpupool::Init(TestPool());
  release_gate = false;
  std::vector<gpupool::ObjectRef<int>> refs{gpupool::Submit(Square, 2), gpupool::Submit(Gate, 1)};
  auto one = gpupool::Wait(refs, 1, std::chrono::seconds(10));
  ASSERT_EQ(one.ready.size(), 1u);
  EXPECT_EQ(*gpupool::Get(one.ready[0]), 4);
  auto timed_out = gpupool::Wait(refs, 2, std::chrono::milliseconds(30));
  EXPECT_EQ(timed_out.not_ready.size(), 1u);
  release_gate = true;
  auto all = gpupool::Wait(refs, 2);
  EXPECT_EQ(all.ready.size(), 2u);
}

TEST(TaskApi, PutMovesAndGetIsAViewWithoutCopy) {
  gpupool::Runtime rt = gpupool::Init(TestPool());
  std::vector<char> big(1 << 20, 'x');
  const char* original = big.data();
  gpupool::ObjectRef<std::vector<char>> ref = gpupool::Put(std::move(big));
  gpupool::View<std::vector<char>> a = gpupool::Get(ref);
  gpupool::View<std::vector<char>> b = gpupool::Get(ref);
  EXPECT_EQ(a->data(), original);  // moved in, not copied
  EXPECT_EQ(&*a, &*b);             // every Get is the same stored object
  std::vector<int> small{1, 2, 3};
  auto copied = gpupool::Put(small);
  EXPECT_NE(gpupool::Get(copied)->data(), small.data());
}

TEST(TaskApi, ObjectsAreFreedWithTheirLastReference) {
  gpupool::Runtime rt = gpupool::Init(TestPool());
  uint64_t before = rt.Stats().live_objects;
  {
    std::vector<gpupool::ObjectRef<int>> refs;
    for (int i = 0; i < 10000; ++i) refs.push_back(gpupool::Submit(Square, i));
    int64_t sum = 0;
    for (auto& r : refs) sum += *gpupool::Get(r);
    EXPECT_GT(sum, 0);
    EXPECT_GE(rt.Stats().live_objects, before + 10000);
  }
  // A worker drops its own hold on a result just after publishing it: allow it a moment.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (rt.Stats().live_objects != before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(rt.Stats().live_objects, before);
}

TEST(TaskApi, CancelAPendingTask) {
  gpupool::Runtime rt = gpupool::Init(TestPool());
  release_gate = false;
  gpupool::ObjectRef<int> blocker = gpupool::Submit(Gate, 1);
  gpupool::ObjectRef<int> victim = gpupool::Submit(Add, blocker, 1);
  EXPECT_EQ(rt.Stats().waiting_for_dependencies, 1u);  // counted while its input is missing
  gpupool::Cancel(victim);
  try {
    gpupool::Get(victim);
    FAIL();
  } catch (const gpupool::Error& e) {
    EXPECT_EQ(e.code(), gpupool::ErrorCode::kCancelled);
  }
  release_gate = true;
  EXPECT_EQ(*gpupool::Get(blocker), 1);
}

TEST(TaskApi, FractionalTasksGetSlotsAndBudgets) {
  gpupool::Runtime rt = gpupool::Init(TestPool());
  std::string where = *gpupool::Get(gpupool::Task(WhereAmI).Gpus(0.25).GpuMemoryMib(4096).Submit());
  EXPECT_THAT(where, HasSubstr("/fraction/4096"));
  EXPECT_EQ(*gpupool::Get(gpupool::Submit(WhereAmI)), "cpu");
  EXPECT_THAT(*gpupool::Get(gpupool::Task(WhereAmI).Gpus(1).Submit()), HasSubstr("/whole/81"));
  // Over budget fails that task only.
  auto over = gpupool::Task(AllocateMiB).Gpus(0.25).GpuMemoryMib(512).Submit(600);
  auto within = gpupool::Task(AllocateMiB).Gpus(0.25).GpuMemoryMib(512).Submit(100);
  try {
    gpupool::Get(over);
    FAIL();
  } catch (const gpupool::TaskError& e) {
    EXPECT_EQ(e.code(), gpupool::ErrorCode::kResourceExhausted);
    EXPECT_THAT(e.original_message(), HasSubstr("budget of 512 MiB"));
  }
  EXPECT_EQ(*gpupool::Get(within), 100ull << 20);
}

TEST(TaskApi, InitTwiceIsRefusedAndFlagsAreParsed) {
  std::string a0 = "prog", a1 = "--gpupool-simulate", a2 = "2xL4", a3 = "--mine", a4 = "--gpupool-team=vision";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data(), nullptr};
  int argc = 5;
  gpupool::Runtime rt = gpupool::Init(argc, argv);
  EXPECT_EQ(argc, 2);
  EXPECT_STREQ(argv[1], "--mine");
  EXPECT_EQ(rt.Stats().pool_gpus, 2);
  EXPECT_THROW(gpupool::Init(TestPool()), gpupool::Error);
  std::string b1 = "--gpupool-nodes", b2 = "zero";
  char* bad[] = {a0.data(), b1.data(), b2.data(), nullptr};
  int bad_argc = 3;
  EXPECT_THROW(gpupool::Init(bad_argc, bad), gpupool::Error);
}

TEST(TaskApi, BadConfigFailsInitCleanlyAndInitWorksAfter) {
  gpupool::RuntimeOptions bad = TestPool();
  bad.config_text = "teams:\n  - name: x\n    quota: 3\n";
  try {
    gpupool::Init(bad);
    FAIL() << "a bad configuration was accepted";
  } catch (const gpupool::Error& e) {
    EXPECT_EQ(e.code(), gpupool::ErrorCode::kInvalidArgument) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("unknown key 'quota'"));
  }
  gpupool::Runtime rt = gpupool::Init(TestPool());
  EXPECT_EQ(*gpupool::Get(gpupool::Submit(Square, 5)), 25);
}

// Host cores and memory a GPU task's lease holds, counted against a node that declares its own:
// two one-GPU tasks asking 6 of its 8 cores take turns although it has two GPUs free, the same
// tasks without them overlap, and a task asking more cores or memory than any node has fails at
// once, with the scheduler's reason. A CPU task refuses them (it holds nothing in the pool).
TEST(TaskApi, HostCpusAndMemoryAreHeldByTheLeaseAndCountedAgainstTheNode) {
  gpupool::RuntimeOptions o;
  o.config_text = R"(
nodes:
  - name: box
    cpus: 8
    memory_gib: 16
    gpus:
      - {model: H100-80GB, count: 2}
)";
  o.lease_linger_ms = 20;
  gpupool::Runtime rt = gpupool::Init(o);
  auto overlap = [](const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    return a[0] < b[1] && b[0] < a[1];
  };
  {
    auto a = gpupool::Task(HoldFor).Gpus(1).Submit(800);  // long: together even on a busy machine
    auto b = gpupool::Task(HoldFor).Gpus(1).Submit(800);
    EXPECT_TRUE(overlap(*gpupool::Get(a), *gpupool::Get(b))) << "two GPUs free, nothing else asked: together";
  }
  {
    auto a = gpupool::Task(HoldFor).Gpus(1).Cpus(6).HostMemoryMib(4096).Submit(300);
    auto b = gpupool::Task(HoldFor).Gpus(1).Cpus(6).HostMemoryMib(4096).Submit(300);
    EXPECT_FALSE(overlap(*gpupool::Get(a), *gpupool::Get(b))) << "12 cores asked of 8: one at a time";
  }
  {
    auto a = gpupool::Task(HoldFor).Gpus(1).HostMemoryMib(12 << 10).Submit(300);
    auto b = gpupool::Task(HoldFor).Gpus(1).HostMemoryMib(12 << 10).Submit(300);
    EXPECT_FALSE(overlap(*gpupool::Get(a), *gpupool::Get(b))) << "24 GiB asked of 16: one at a time";
  }
  for (auto too_big : {gpupool::TaskOptions().Gpus(1).Cpus(16), gpupool::TaskOptions().Gpus(1).HostMemoryMib(32 << 10)}) {
    auto start = std::chrono::steady_clock::now();
    try {
      (void)*gpupool::Get(gpupool::Task(HoldFor).Options(too_big).Submit(1));
      ADD_FAILURE() << "a task asking more than any node has ran";
    } catch (const gpupool::Error& e) {
      EXPECT_THAT(e.what(), ::testing::AnyOf(::testing::HasSubstr("cpu"), ::testing::HasSubstr("CPU"),
                                             ::testing::HasSubstr("host-memory")));
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "it must fail at once";
  }
  try {
    (void)*gpupool::Get(gpupool::Task(Square).Cpus(2).Submit(3));
    ADD_FAILURE() << "a CPU task took Cpus";
  } catch (const gpupool::Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("a CPU task"));
  }
}

}  // namespace
