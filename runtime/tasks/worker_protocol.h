// File: runtime/tasks/worker_protocol.h
//
// What a job's driver and its worker processes say to each other, one message per frame of a
// FrameSocket (runtime/rpc/frame_socket.h), encoded with gpupool's codec (gpupool/codec.h): a
// kind, then the message. Decoding treats the bytes as untrusted (gpupool::Error kDataLoss, turned
// into a status here).
//
//   worker -> driver  Hello (first), Proof (answer to Challenge), Outcomes, Log, Checkpointed, Fetch,
//                     Fetched, Borrow, Release, ObjectsAt, Submit, Bye
//   driver -> worker  Challenge (answer to Hello), Welcome (answer to Proof, or a refusal at any
//                     point of the handshake), Tasks, StopLease, Fetch, Fetched, FetchFrom, Release,
//                     Submitted, Stop
//
// The handshake proves the job's worker key both ways without sending it (runtime/tasks/job_proof.h).
//
// A lease's tasks run on the worker one after another on the lease's thread, as in the driver's
// own process. The driver sends a task's inputs with it (the values of its ObjectRef arguments,
// encoded), except those a worker keeps, which the task's worker gets from there (InputAt,
// runtime/tasks/task_inputs.h); the worker sends back each task's outcome (a small result encoded in it, or why the
// task failed or stopped), and imports the driver's objects that arguments name inside them
// (Fetch, answered by Fetched, or by FetchFrom when another worker keeps it: the worker gets it
// from there): lazily, when a task needs a value, keeping the object alive at the driver while
// the worker holds a ref to it (Borrow, then Release: runtime/tasks/driver_imports.h).
//
// Objects the worker holds for the driver (Ray's ownership: the driver owns them, the worker
// keeps their values): a result too big to go with its outcome (Outcome::held), and objects the
// worker made whose refs went to the driver. The driver fetches them when something there needs
// the value (Fetch, the other way), and lets go of them with Release once it has the value or
// has dropped its refs. The worker counts one hold per ref it sent; Release says how many.
#ifndef GPUPOOL_RUNTIME_TASKS_WORKER_PROTOCOL_H_
#define GPUPOOL_RUNTIME_TASKS_WORKER_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpupool/error.h"
#include "gpupool/internal/object_header.h"

namespace gpupool::runtime::wire {

enum class Kind : uint64_t {
  kHello = 1, kWelcome = 2, kTasks = 3, kStopLease = 4, kStop = 5,
  kOutcomes = 6, kLog = 7, kCheckpointed = 8, kBye = 9, kFetch = 10, kFetched = 11, kRelease = 12,
  kBorrow = 13, kObjectsAt = 14, kFetchFrom = 15, kSubmit = 16, kSubmitted = 17, kChallenge = 18, kProof = 19,
};

// What both sides speak: changed whenever any message here changes, so a worker and a driver of
// different gpupool builds (a Python package beside a C++ build, a node not upgraded yet) say so
// in plain words instead of misreading each other. Hello and Welcome carry it first.
inline constexpr uint64_t kProtocol = 4;
// The protocol a Hello or Welcome frame says it speaks (readable whatever else it holds).
absl::StatusOr<uint64_t> ProtocolOf(std::string_view frame);
// What either side says when `other` speaks protocol `theirs` and `self` this one: "<other> speaks
// worker protocol N and <self> M: run the same gpupool build on the driver and on every node".
std::string ProtocolMismatch(const char* other, uint64_t theirs, const char* self);

// The first frame a worker sends. The job's worker key, which the worker read from the pipe its
// agent handed it (never from argv or the environment), is never sent: each side proves it holds
// it (job_proof.h), the driver first (Challenge), then the worker (Proof).
struct Hello {
  uint64_t protocol = kProtocol;
  std::string nonce;  // the worker's, fresh
  std::string job;
  std::string node;
  int64_t pid = 0;
};
// What either side accepts from the other until the handshake has proved the key: a Hello, a
// Challenge, a Proof or a refusal is far below this.
inline constexpr size_t kMaxHandshakeBytes = 64 << 10;

struct Challenge {
  std::string nonce;  // the driver's, fresh
  std::string proof;  // JobProof(key, kDriver, job, the worker's nonce, the driver's)
};
struct Proof {
  std::string proof;  // JobProof(key, kWorker, job, the worker's nonce, the driver's)
};

// The driver's answer: what the worker's runtime needs to run the job's tasks like the driver.
struct Welcome {
  uint64_t protocol = kProtocol;
  std::string refusal;         // non-empty: go away (no proof of the key, unknown node, another protocol)
  std::string team;
  std::string driver;          // "simulated" | "nvidia": how the node's GPUs are reached
  std::string node_inventory;  // the node's GPUs as rpc::EncodeNodes encodes them
  double pool_now_s = 0;       // the driver's pool clock when it answered
  double clock_speed = 1;
  std::string checkpoint_dir;  // the driver's (empty: the worker's default)
  bool checkpoint_dir_shared = false;
  int64_t checkpoint_keep_last = 2;
  uint64_t checkpoint_staging_mib = 2048;
  int64_t linger_ms = 2000;    // exit after this long without a lease (and nothing held for the driver)
  // The worker's own objects take ids from here up (kWorkerIdSpan of them): each worker of the
  // job has a range of its own, so an id names its maker everywhere in the job.
  uint64_t object_id_base = 0;
  // What UCX fetches of the results the job's workers keep carry, the driver's and other
  // workers' (a key of its own: UCX carries it in clear, so never the job's secret).
  std::string objects_key;
};

// The job's object ids: the driver's count from 1 (an mpirun rank's from rank << 48, far below);
// the k-th worker's from kWorkerIdBase + k * kWorkerIdSpan (k < 2^23). A span of 2^40 ids outlasts
// a worker making a million objects a second for twelve days; nothing checks past that.
inline constexpr uint64_t kWorkerIdBase = uint64_t{1} << 63;
inline constexpr uint64_t kWorkerIdSpan = uint64_t{1} << 40;
inline bool IsWorkerObjectId(uint64_t id) { return id >= kWorkerIdBase; }

// An ObjectRef argument the driver does not send with its task, because a worker keeps its value
// (a result too big to go with its outcome): the worker that runs the task gets it from there
// itself, so the bytes cross the network once, never through the driver (Ray's workers pull
// their arguments from where they live the same way).
struct InputAt {
  uint64_t index = 0;       // which of TaskToRun::inputs (sent empty)
  uint64_t object = 0;      // the driver's id: what to ask the driver for when nothing else works
  uint64_t held = 0;        // the keeper's id for the bytes (Outcome::held)
  bool here = false;        // the keeper is the worker that runs the task
  std::string ucx_address;  // else the keeper's ObjectServer (Welcome::objects_key; empty: none)
  uint64_t bytes = 0;       // its size (Outcome::held_bytes): fetched straight into room that size
};

struct TaskToRun {
  uint64_t id = 0;
  std::string function;            // the registered name
  std::string args;                // as encoded by the submitter
  std::vector<std::string> inputs; // each ObjectRef argument's value, encoded, in order
  std::vector<InputAt> inputs_at;  // the inputs not sent (their `inputs` are empty)
  std::string options;             // TaskOptions, encoded
  int64_t attempt = 0;
  std::string checkpoint_key;      // the driver's key for the task: snapshots go there, a rerun resumes
  std::string resume_from;
  double checkpoint_interval_s = 0;
};

// Tasks for one lease; the first batch for a lease carries the lease itself (pool::Lease as
// rpc::LeaseToBytes encodes it).
struct Tasks {
  std::string lease_id;
  std::string lease;  // empty after the first batch
  std::vector<TaskToRun> tasks;
};

// The driver's lease is revoked (stop at a safe point; `deadline_s` pool time), lost (stop now),
// simply done (no more tasks: end its thread once the queue is empty), or the driver is shutting
// down (start nothing more; the running task finishes or stops at a safe point, as in-process).
struct StopLease {
  enum class Why : uint64_t { kDone = 0, kRevoked = 1, kLost = 2, kShutdown = 3 };
  std::string lease_id;
  Why why = Why::kDone;
  double deadline_s = 0;
};

// One task's outcome (runtime/tasks/run_outcome.h), its value encoded.
struct Outcome {
  uint64_t id = 0;
  uint64_t kind = 0;  // RunOutcome::Kind
  std::string value;
  int64_t code = 0;   // ErrorCode
  std::string message;
  std::string cause;
  std::string location;
  int64_t busy_gpu_micros = 0;
  int64_t lost_gpu_micros = 0;
  bool system_failure = false;
  std::string resume_note;
  // Non-zero: the result stayed in the worker (too big to go with its outcome) under this id of
  // the worker's; `value` is empty and the driver fetches it when the value is needed.
  uint64_t held = 0;
  // The kept result holds refs to objects this worker made: only the driver (which records them
  // as it reads the value) or this worker can read it, never another worker straight from here.
  bool held_own_refs = false;
  uint64_t held_bytes = 0;  // the kept result's size: a worker fetching it makes room for it first
};

// Results whose encoding is over this stay in the worker until the driver fetches them (Ray
// inlines returns up to 100 KiB the same way).
inline constexpr size_t kInlineResultBytes = 100 << 10;

// What a frame may hold between a driver and its workers (FrameSocket's limit, less room for the
// framing), and about the bytes one task or outcome adds to a frame (never fewer).
inline constexpr size_t kMaxWorkerFrameBytes = (size_t{1} << 30) - (size_t{1} << 20);
size_t WireBytes(const TaskToRun& t);
size_t WireBytes(const Outcome& o);
// What one task (with its inputs) may take to a worker, or a worker send its driver with a task it
// submits: a frame, less room for the rest of the frame.
inline constexpr size_t kMaxTaskWireBytes = kMaxWorkerFrameBytes - (size_t{64} << 10);

// A batch as frames of at most `limit` bytes: one frame when it fits, else as few as keep each
// under it. Tasks: every one must fit a frame on its own (the driver fails a bigger one before
// batching it); the lease goes with the first frame. Outcomes: one that cannot fit on its own
// becomes its task's failure (kResourceExhausted, naming its size) instead of never arriving.
std::vector<std::string> EncodeTaskFrames(Tasks& message, size_t limit);
std::vector<std::string> EncodeOutcomeFrames(std::vector<Outcome>& outcomes, size_t limit);

struct Log {
  bool is_stderr = false;
  std::string line;  // without its newline
};

struct Checkpointed {
  std::string lease_id;
  std::string task_key;
  uint64_t version = 0;
  int64_t step = 0;
  std::string path;
};

// One side asks the other for an object by id, and the other answers once the object is
// resolved (an answer waits while a task still computes the object, or while the driver fetches
// it from the worker that keeps it; `pending` only for a task's input being made again). A worker asks its driver for the driver's
// objects it holds refs to (runtime/tasks/driver_imports.h: the request is the object's id), and
// for a task's input it could not get from the worker that keeps it (runtime/tasks/task_inputs.h:
// the request is the id of the input's own entry, in the worker's range); the driver asks a
// worker for an object the worker keeps for it (runtime/tasks/remote_objects.h).
struct Fetch {
  uint64_t request = 0;  // the asker's, to match the answer
  uint64_t object = 0;   // the object's id (a held result: the id in Outcome::held)
  // A worker asking its driver: answer with the value, never FetchFrom (the worker could not
  // get it from where it is, or was told already that it cannot).
  bool through_driver = false;
  // A task's input (TaskInputs): one being made again is answered Fetched::pending at once, and
  // the task goes back to its driver to wait for it unleased.
  bool for_input = false;
};

// The driver's answer to a worker's Fetch of an object another worker keeps (a result over
// 100 KiB), in place of Fetched: get it from there (`at`: the keeper's UCX address, its id and
// size there; `here`: this worker itself keeps it). A worker that cannot asks again with
// Fetch::through_driver. The worker borrows the object meanwhile, so the keeper keeps the bytes
// until the driver reads them itself or lets go of it.
struct FetchFrom {
  uint64_t request = 0;
  InputAt at;
};
struct Fetched {
  uint64_t request = 0;
  // Being made again (its keeper died; only to Fetch::for_input): `code` and `value` say nothing.
  bool pending = false;
  int64_t code = 0;      // ErrorCode; 0 (kOk): `value` is the object's value, encoded
  std::string message;
  std::string value;
};

// Big values move in fetches, so they are framed and read without the copies a Fetched's own
// string field would cost: EncodeFetchedBox writes the answer for a value straight from its box
// (a value that arrived encoded, as a result a worker keeps does, is copied once, into the frame);
// FetchedView reads an answer whose value stays in the frame. Both agree with Encode(Fetched)
// and DecodeFetched byte for byte.
std::string EncodeFetchedBox(uint64_t request, const detail::ValueBox& value);
struct FetchedView {
  uint64_t request = 0;
  bool pending = false;
  int64_t code = 0;
  std::string message;
  std::string_view value;  // into the frame: valid while it is
};
absl::StatusOr<FetchedView> DecodeFetchedView(std::string_view frame);
// The answer to a Fetch of a resolved `object` (either side): its value, or its failure, or why
// it cannot go (its codec threw; over kMaxWorkerFrameBytes). `*sent_value`: the value went.
std::string AnswerFetch(uint64_t request, detail::ObjectHeader* object, bool* sent_value);

// One side lets go of `count` holds it has on the other's object: the driver of a worker's
// object the worker keeps for it, a worker of a borrowed object of the driver's.
struct Release {
  uint64_t object = 0;
  uint64_t count = 0;
  // The driver read the value (and so the refs inside, whose holds it returns with theirs). A
  // result the worker keeps, released without this, gives back the holds on the refs inside
  // itself, past the first `refs_read` (those the driver read before its codec threw; 0 when it
  // dropped the value unread).
  bool read = false;
  uint64_t refs_read = 0;
};

// A worker holds a ref to the driver's object: the driver keeps it alive until the worker's Release.
struct Borrow {
  uint64_t object = 0;
};

// Where the driver may fetch the results a worker keeps over UCX (transport/object_transfer.h:
// the worker's ObjectServer, keyed by Welcome::objects_key, serves each by its id in decimal).
// Sent once, before the outcome of the worker's first kept result, by a worker that could start
// UCX; without it the driver fetches over this connection.
struct ObjectsAt {
  std::string ucx_address;
};

// A task running in a worker submits a GPU task (Ray's nested tasks). The driver, which owns every
// task and object of the job, submits it as its own and answers Submitted with its result's id,
// lent to the worker (the worker's Borrow of it takes the loan over). The refs among its
// arguments go by id (`deps`: its ObjectRef arguments, in order; `nested`: refs inside values):
// the driver's objects (the worker borrows them meanwhile). An object this worker made goes with
// its value, encoded: an ObjectRef argument's at its index in `deps` (`inline_deps`), a nested
// ref's at its index in `nested` (`inline_nested`; the driver keeps that copy under its id); the
// driver's objects named inside those values are `inline_refs` (the driver keeps them with the task).
struct Submit {
  uint64_t request = 0;  // the worker's, to match the answer
  std::string function;  // the registered name
  std::string args;      // as encoded by the submitter
  std::string options;   // TaskOptions, encoded
  std::vector<uint64_t> deps;
  std::vector<uint64_t> nested;
  std::vector<uint64_t> inline_deps;
  std::vector<std::string> inline_dep_values;
  std::vector<uint64_t> inline_nested;
  std::vector<std::string> inline_nested_values;
  std::vector<uint64_t> inline_refs;
};
struct Submitted {
  uint64_t request = 0;
  uint64_t object = 0;  // the result's id; 0: refused (`code`, `message` say why)
  int64_t code = 0;
  std::string message;
};

std::string Encode(const Hello& m);
std::string Encode(const Welcome& m);
std::string Encode(const Tasks& m);
std::string Encode(const StopLease& m);
std::string EncodeStop();
std::string Encode(const std::vector<Outcome>& m);
std::string Encode(const Log& m);
std::string Encode(const Checkpointed& m);
std::string EncodeBye();
std::string Encode(const Fetch& m);
std::string Encode(const Fetched& m);
std::string Encode(const Release& m);
std::string Encode(const Borrow& m);
std::string Encode(const ObjectsAt& m);
std::string Encode(const FetchFrom& m);
std::string Encode(const Submit& m);
size_t WireBytes(const Submit& m);  // about the bytes it encodes to (never fewer)
std::string Encode(const Submitted& m);
std::string Encode(const Challenge& m);
std::string Encode(const Proof& m);

// The frame's kind (kDataLoss for an empty or unknown one), then its body by kind.
absl::StatusOr<Kind> KindOf(std::string_view frame);
absl::StatusOr<Hello> DecodeHello(std::string_view frame);
absl::StatusOr<Welcome> DecodeWelcome(std::string_view frame);
absl::StatusOr<Tasks> DecodeTasks(std::string_view frame);
absl::StatusOr<StopLease> DecodeStopLease(std::string_view frame);
absl::StatusOr<std::vector<Outcome>> DecodeOutcomes(std::string_view frame);
absl::StatusOr<Log> DecodeLog(std::string_view frame);
absl::StatusOr<Checkpointed> DecodeCheckpointed(std::string_view frame);
absl::StatusOr<Fetch> DecodeFetch(std::string_view frame);
absl::StatusOr<Fetched> DecodeFetched(std::string_view frame);
absl::StatusOr<Release> DecodeRelease(std::string_view frame);
absl::StatusOr<Borrow> DecodeBorrow(std::string_view frame);
absl::StatusOr<ObjectsAt> DecodeObjectsAt(std::string_view frame);
absl::StatusOr<FetchFrom> DecodeFetchFrom(std::string_view frame);
absl::StatusOr<Submit> DecodeSubmit(std::string_view frame);
absl::StatusOr<Submitted> DecodeSubmitted(std::string_view frame);
absl::StatusOr<Challenge> DecodeChallenge(std::string_view frame);
absl::StatusOr<Proof> DecodeProof(std::string_view frame);

}  // namespace gpupool::runtime::wire

#endif  // GPUPOOL_RUNTIME_TASKS_WORKER_PROTOCOL_H_
