// The task API's edge: the process's current runtime, Init's flag and environment parsing, and the
// exported functions the public templates call.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gpupool/runtime.h"
#include "runtime/api/testing_seam.h"
#include "runtime/tasks/status_to_error.h"
#include "runtime/bootstrap/pool_join.h"
#include "runtime/bootstrap/worker_join.h"
#include "runtime/sync/mutex.h"
#include "runtime/tasks/worker_host.h"
#include "runtime/tasks/job_runtime.h"

namespace gpupool {

// Runtime's friend: the only code that makes a Runtime from a JobRuntime or reaches inside one.
struct detail::RuntimeAccess {
  static Runtime Make(std::unique_ptr<runtime::JobRuntime> impl) { return Runtime(std::move(impl)); }
  static runtime::JobRuntime& Internals(Runtime& rt) { return *rt.impl_; }
};

runtime::JobRuntime& InternalsForTesting(Runtime& rt) { return detail::RuntimeAccess::Internals(rt); }
namespace {

// The runtime the free functions use. One per process at a time (see runtime.h for why).
std::atomic<runtime::JobRuntime*> current_runtime{nullptr};
// Whether this process is a worker serving a driver elsewhere (ServeAsWorker). A worker's own
// objects get ids in a range its driver gave it (wire::Welcome::object_id_base: above the
// driver's, which count from 1, and apart from every other worker's), so an id says whose object
// it is everywhere in the job: without this, a driver's id nested in a task's arguments would be
// looked up here and could name an unrelated object of the worker's.
std::atomic<bool> serving_as_worker{false};
std::atomic<ObjectId> worker_object_base{0};
// In a worker process, whether `id` names an object the worker made (not one of its driver's,
// which keep the driver's ids there, nor another worker's, which the driver passes on).
bool IsWorkersOwnObject(ObjectId id) {
  if (!serving_as_worker.load(std::memory_order_acquire)) return false;
  const ObjectId base = worker_object_base.load(std::memory_order_relaxed);
  return id > base && id - base < runtime::wire::kWorkerIdSpan;
}
// In a worker process, while it serves its driver (ServeAsWorker): the host that imports the
// driver's objects, and how many imports are under way. The runtime's CPU task threads outlive
// Serve, so the host is taken away under the lock and not destroyed until its imports ended.
struct WorkerHostSlot {
  runtime::Mutex mu;
  runtime::CondVar idle;
  runtime::WorkerHost* host ABSL_GUARDED_BY(mu) = nullptr;
  int imports ABSL_GUARDED_BY(mu) = 0;
};
WorkerHostSlot& CurrentWorkerHost() {
  static auto* slot = new WorkerHostSlot;  // never destroyed: a worker ends with _exit
  return *slot;
}
// The worker's host, held for one import or submission (counted in WorkerHostSlot::imports, which
// ServeAsWorker waits to drop to 0 before it destroys the host); null once the host is gone.
class PinnedWorkerHost {
 public:
  PinnedWorkerHost() : slot_(CurrentWorkerHost()) {
    runtime::MutexLock lock(&slot_.mu);
    host_ = slot_.host;
    if (host_ != nullptr) ++slot_.imports;
  }
  ~PinnedWorkerHost() {
    if (host_ == nullptr) return;
    runtime::MutexLock lock(&slot_.mu);
    if (--slot_.imports == 0) slot_.idle.NotifyAll();
  }
  PinnedWorkerHost(const PinnedWorkerHost&) = delete;
  PinnedWorkerHost& operator=(const PinnedWorkerHost&) = delete;
  runtime::WorkerHost* get() const { return host_; }

 private:
  WorkerHostSlot& slot_;
  runtime::WorkerHost* host_ = nullptr;
};

runtime::JobRuntime& Current() {
  runtime::JobRuntime* rt = current_runtime.load(std::memory_order_acquire);
  if (rt == nullptr) {
    throw Error(ErrorCode::kFailedPrecondition, "no gpupool runtime: call gpupool::Init first");
  }
  return *rt;
}

int ParsePositiveInt(const std::string& flag, const std::string& value) {
  int n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < 1) {
    throw Error(ErrorCode::kInvalidArgument, flag + " wants a positive whole number, got '" + value + "'");
  }
  return n;
}

double ParsePositiveDouble(const std::string& flag, const std::string& value) {
  double x = 0;
  if (!absl::SimpleAtod(value, &x) || !(x > 0)) {
    throw Error(ErrorCode::kInvalidArgument, flag + " wants a positive number, got '" + value + "'");
  }
  return x;
}

uint64_t ParseWholeNumber(const std::string& flag, const std::string& value) {
  uint64_t n = 0;
  if (!absl::SimpleAtoi(value, &n)) {
    throw Error(ErrorCode::kInvalidArgument, flag + " wants a whole number >= 0, got '" + value + "'");
  }
  return n;
}

bool ParseBool(const std::string& flag, const std::string& value) {
  if (value == "1" || value == "true" || value == "yes") return true;
  if (value == "0" || value == "false" || value == "no" || value.empty()) return false;
  throw Error(ErrorCode::kInvalidArgument, flag + " wants 1 or 0, got '" + value + "'");
}

// Applies one setting by its flag name; false when the name is not gpupool's.
bool ApplySetting(RuntimeOptions& o, const std::string& flag, const std::string& value) {
  if (flag == "--gpupool-config") o.config_path = value;
  else if (flag == "--gpupool-simulate") o.simulate = value;
  else if (flag == "--gpupool-driver") o.driver = value;
  else if (flag == "--gpupool-nodes") o.node_count = ParsePositiveInt(flag, value);
  else if (flag == "--gpupool-team") o.team = value;
  else if (flag == "--gpupool-clock-speed") o.clock_speed = ParsePositiveDouble(flag, value);
  else if (flag == "--gpupool-host-memory-reuse-mib") o.host_memory_reuse_mib = ParseWholeNumber(flag, value);
  else if (flag == "--gpupool-pool") o.pool_address = value;
  else if (flag == "--gpupool-token") o.pool_token = value;
  else if (flag == "--gpupool-node") o.node_name = value;
  else if (flag == "--gpupool-head-listen") o.head_listen = value;
  else if (flag == "--gpupool-local-only") o.local_only = ParseBool(flag, value);
  else if (flag == "--gpupool-worker-binary") o.worker_binary = value;
  else if (flag == "--gpupool-worker-linger-ms") o.worker_linger_ms = static_cast<int>(ParseWholeNumber(flag, value));
  else return false;
  return true;
}

}  // namespace

Runtime::Runtime(std::unique_ptr<runtime::JobRuntime> impl) : impl_(std::move(impl)) {}
Runtime::Runtime(Runtime&&) noexcept = default;
Runtime& Runtime::operator=(Runtime&& o) noexcept {
  if (this != &o) {
    Runtime dying(std::move(*this));
    impl_ = std::move(o.impl_);
  }
  return *this;
}
Runtime::~Runtime() {
  if (impl_ == nullptr) return;
  runtime::JobRuntime* expected = impl_.get();
  current_runtime.compare_exchange_strong(expected, nullptr);
  impl_.reset();
}

RuntimeStats Runtime::Stats() const { return impl_->Stats(); }
const std::string& Runtime::notice() const { return impl_->notice(); }
int Runtime::rank() const { return impl_->rank(); }
int Runtime::ranks() const { return impl_->ranks(); }
const std::string& Runtime::node() const { return impl_->node(); }

// A worker process (started by a node's agent for a driver elsewhere: runtime/bootstrap/
// worker_join.h) serves its driver until told to stop, then exits: Init never returns in it.
[[noreturn]] void ServeAsWorker(const std::vector<std::string>& args) {
  auto fail = [](const std::string& why) {
    std::fprintf(stderr, "gpupool worker (pid %d): %s\n", static_cast<int>(getpid()), why.c_str());
    runtime::StopForwardingOutput();
    std::fflush(stderr);
    _exit(3);
  };
  absl::StatusOr<runtime::WorkerJoin> join = runtime::JoinAsWorker(args);
  if (!join.ok()) fail(std::string(join.status().message()));
  runtime::ForwardOutputTo(join->driver.get());
  absl::StatusOr<std::unique_ptr<runtime::JobRuntime>> rt =
      runtime::JobRuntime::Start(join->options, std::move(join->joined));
  if (!rt.ok()) fail(std::string(rt.status().message()));
  (*rt)->store().SetIdBase(join->object_id_base);  // before any object exists here
  worker_object_base.store(join->object_id_base, std::memory_order_relaxed);
  serving_as_worker.store(true, std::memory_order_release);
  current_runtime.store(rt->get(), std::memory_order_release);
  absl::Status served;
  {
    runtime::WorkerHost host(**rt, *join->driver, join->linger, join->objects_key, join->driver_on_loopback);
    // A worker whose driver is gone leaves within 2 s even if a task never reaches a safe point:
    // nobody is left to read its work. (The head also stops a job's workers once the job is gone
    // for good, but keeps them through its reclaim window: the driver may just have lost the head.)
    host.OnDriverLost([] {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        std::fprintf(stderr, "gpupool worker (pid %d): its driver is gone and a task did not stop within 2 s: exiting\n",
                     static_cast<int>(getpid()));
        runtime::StopForwardingOutput();
        _exit(0);
      }).detach();
    });
    WorkerHostSlot& slot = CurrentWorkerHost();
    {
      runtime::MutexLock lock(&slot.mu);
      slot.host = &host;
    }
    served = host.Serve();  // every exit has stopped the imports
    runtime::MutexLock lock(&slot.mu);
    slot.host = nullptr;
    while (slot.imports > 0) slot.idle.Wait(&slot.mu);
  }
  current_runtime.store(nullptr, std::memory_order_release);
  rt->reset();
  if (!served.ok() && served.code() != absl::StatusCode::kUnavailable) {
    std::fprintf(stderr, "gpupool worker (pid %d): %s\n", static_cast<int>(getpid()), std::string(served.message()).c_str());
  }
  runtime::StopForwardingOutput();
  // Not exit(): the program's static objects belong to its main, which a worker never ran.
  _exit(served.ok() || served.code() == absl::StatusCode::kUnavailable ? 0 : 4);
}

Runtime Init(RuntimeOptions options) {
  if (std::vector<std::string> own = runtime::OwnCommandLine(); runtime::IsWorkerProcess(own)) ServeAsWorker(own);
  if (current_runtime.load() != nullptr) {
    throw Error(ErrorCode::kFailedPrecondition,
                "a gpupool runtime is already running in this process (one per process)");
  }
  runtime::JoinedPool joined = runtime::ValueOrThrow(runtime::JoinPool(options));
  std::unique_ptr<runtime::JobRuntime> rt =
      runtime::ValueOrThrow(runtime::JobRuntime::Start(std::move(options), std::move(joined)));
  runtime::JobRuntime* expected = nullptr;
  if (!current_runtime.compare_exchange_strong(expected, rt.get())) {
    throw Error(ErrorCode::kFailedPrecondition,
                "a gpupool runtime is already running in this process (one per process)");
  }
  return detail::RuntimeAccess::Make(std::move(rt));
}

RuntimeOptions OptionsFromFlags(int& argc, char** argv) {
  RuntimeOptions o;
  const std::pair<const char*, const char*> env[] = {
      {"GPUPOOL_CONFIG", "--gpupool-config"}, {"GPUPOOL_SIMULATE", "--gpupool-simulate"},
      {"GPUPOOL_DRIVER", "--gpupool-driver"}, {"GPUPOOL_NODES", "--gpupool-nodes"},
      {"GPUPOOL_TEAM", "--gpupool-team"},     {"GPUPOOL_CLOCK_SPEED", "--gpupool-clock-speed"},
      {"GPUPOOL_HOST_MEMORY_REUSE_MIB", "--gpupool-host-memory-reuse-mib"},
      {"GPUPOOL_ADDRESS", "--gpupool-pool"},  {"GPUPOOL_TOKEN", "--gpupool-token"},
      {"GPUPOOL_NODE", "--gpupool-node"},     {"GPUPOOL_HEAD_LISTEN", "--gpupool-head-listen"},
      {"GPUPOOL_LOCAL_ONLY", "--gpupool-local-only"}, {"GPUPOOL_WORKER_BINARY", "--gpupool-worker-binary"},
      {"GPUPOOL_WORKER_LINGER_MS", "--gpupool-worker-linger-ms"}};
  for (const auto& [var, flag] : env) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') ApplySetting(o, flag, v);
  }
  // Flags win over the environment; gpupool's flags are removed so the program sees its own.
  int kept = argc > 0 ? 1 : 0;
  for (int i = kept; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--gpupool-", 0) != 0) {
      argv[kept++] = argv[i];
      continue;
    }
    std::string flag = arg, value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      throw Error(ErrorCode::kInvalidArgument, flag + " needs a value");
    }
    if (!ApplySetting(o, flag, value)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "unknown flag " + flag + " (gpupool's: --gpupool-config, --gpupool-simulate, "
                  "--gpupool-driver, --gpupool-nodes, --gpupool-team, --gpupool-clock-speed, "
                  "--gpupool-host-memory-reuse-mib, --gpupool-pool, --gpupool-token, --gpupool-node, "
                  "--gpupool-head-listen, --gpupool-local-only, --gpupool-worker-binary, "
                  "--gpupool-worker-linger-ms)");
    }
  }
  if (argc > 0) {
    argv[kept] = nullptr;
    argc = kept;
  }
  return o;
}

Runtime Init(int& argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  if (runtime::IsWorkerProcess(args)) ServeAsWorker(args);
  return Init(OptionsFromFlags(argc, argv));
}

namespace detail {

// A GPU task submitted by a task running in a worker: the driver submits it (WorkerHost::SubmitToDriver).
ObjectHeader* SubmitThroughDriver(const FunctionInfo* function, EncodedArgs args, const TaskOptions& options) {
  PinnedWorkerHost host;
  if (host.get() == nullptr) {
    ReleaseRefs(args);
    throw Error(ErrorCode::kCancelled, "the worker is stopping: it sends no more tasks to its driver");
  }
  return host.get()->SubmitToDriver(function, std::move(args), options, &IsWorkersOwnObject);
}

ObjectHeader* SubmitTask(const FunctionInfo* function, EncodedArgs args, const TaskOptions* options) {
  runtime::JobRuntime* rt = current_runtime.load(std::memory_order_acquire);
  if (rt == nullptr) {
    ReleaseRefs(args);
    Current();  // throws
  }
  // A worker leases nothing: its tasks' GPU tasks are the driver's to submit (CPU ones run here).
  if (serving_as_worker.load(std::memory_order_acquire) && options != nullptr && options->gpus > 0) {
    return SubmitThroughDriver(function, std::move(args), *options);
  }
  return rt->Submit(function, std::move(args), options);
}

ObjectHeader* PutValue(std::unique_ptr<ValueBox> value) { return Current().Put(std::move(value)); }

void CancelObject(ObjectHeader* object) {
  Current().Cancel(object);
}

ObjectHeader* ImportFromDriver(ObjectId id, BoxDecoder decode) {
  // One of its own it still has; else the driver's copy (the driver fetched it and the worker let
  // go), or another process's object.
  if (IsWorkersOwnObject(id)) {
    if (runtime::ObjectEntry* live = Current().store().Lookup(id)) return live;
  }
  PinnedWorkerHost host;
  if (host.get() == nullptr) {
    const bool worker = serving_as_worker.load(std::memory_order_acquire);
    throw Error(worker ? ErrorCode::kCancelled : ErrorCode::kFailedPrecondition,
                worker ? "the worker is stopping: it imports no more objects from its driver"
                       : "only a worker process imports objects from its driver");
  }
  // Pending until something here needs the value (runtime/tasks/driver_imports.h).
  return host.get()->Import(id, decode);
}

ObjectHeader* LookupObject(ObjectId id) {
  runtime::ObjectEntry* entry = Current().store().Lookup(id);
  if (entry == nullptr) {
    throw Error(ErrorCode::kNotFound, absl::StrCat("object ", id,
                                                   " does not exist: it was freed when its last "
                                                   "reference went away, or never existed"));
  }
  return entry;
}

void ExportObject(ObjectHeader* object, std::string* ticket) {
  // What a worker encodes for its driver (a task's result, a value the driver fetches): the
  // driver's own objects (imported under their ids) need nothing; the worker's are kept here for
  // the driver, which fetches them when it needs them (runtime/tasks/remote_objects.h). (A
  // worker's task sending a ref to its group of one, SendValue or BroadcastValue, keeps it in
  // the process.)
  if (runtime::WorkerHost* host = runtime::WorkerHost::EncodingForDriver()) {
    if (IsWorkersOwnObject(object->id)) host->HoldForDriver(object);
    else host->KeepUntilSent(object);  // the driver's (or one it passed on): borrowed here until sent
    ticket->clear();
    return;
  }
  *ticket = Current().exchange().Export(static_cast<runtime::ObjectEntry*>(object));
}

ObjectHeader* ImportObject(ObjectId id, BoxDecoder decode, std::string ticket) {
  // In a worker, every ref is its own object or comes through the driver: the driver's (nested
  // in a task's arguments), another worker's that the driver passes on (it fetches that one
  // itself), or one of its own that the driver fetched and this worker has let go of since.
  if (serving_as_worker.load(std::memory_order_acquire)) return ImportFromDriver(id, decode);
  runtime::JobRuntime& rt = Current();
  // In a driver, a ref to an object one of its workers made, met in what a worker sent.
  if (runtime::wire::IsWorkerObjectId(id) && rt.remote_objects() != nullptr) {
    return rt.remote_objects()->Import(id, decode);
  }
  if (runtime::ObjectExchange::OwnerOf(id) == rt.group().rank()) {
    if (runtime::ObjectEntry* live = rt.store().Lookup(id)) {
      try {
        rt.exchange().ReturnedHome(id, ticket);
      } catch (...) {  // a malformed ticket: the lookup's reference goes back
        Release(live);
        throw;
      }
      return live;
    }
    // Freed here once every receipt came, while a rank that passed it on still serves its copy:
    // fetched back from there (the receipt goes once it is). A job of one has no such rank.
    if (rt.group().size() == 1) return LookupObject(id);
  }
  return rt.exchange().Import(id, decode, std::move(ticket));
}

}  // namespace detail
}  // namespace gpupool
