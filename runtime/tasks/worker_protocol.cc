// File: runtime/tasks/worker_protocol.cc
//
// Each message is its fields in order, through gpupool's codec. One field list per message
// (Fields below) serves both directions, so encoder and decoder cannot disagree.
#include "runtime/tasks/worker_protocol.h"

#include <algorithm>
#include <chrono>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpupool/codec.h"
#include "runtime/tasks/run_outcome.h"

namespace gpupool::runtime::wire {

template <typename M, typename F>
void Fields(M& m, F&& f) {
  using T = std::remove_const_t<M>;
  if constexpr (std::is_same_v<T, Hello>) {
    f(m.protocol), f(m.nonce), f(m.job), f(m.node), f(m.pid);
  } else if constexpr (std::is_same_v<T, Challenge>) {
    f(m.nonce), f(m.proof);
  } else if constexpr (std::is_same_v<T, Proof>) {
    f(m.proof);
  } else if constexpr (std::is_same_v<T, Welcome>) {
    f(m.protocol), f(m.refusal), f(m.team), f(m.driver), f(m.node_inventory), f(m.pool_now_s), f(m.clock_speed),
        f(m.checkpoint_dir), f(m.checkpoint_dir_shared), f(m.checkpoint_keep_last), f(m.checkpoint_staging_mib),
        f(m.linger_ms), f(m.object_id_base), f(m.objects_key);
  } else if constexpr (std::is_same_v<T, TaskToRun>) {
    f(m.id), f(m.function), f(m.args), f(m.inputs), f(m.inputs_at), f(m.options), f(m.attempt), f(m.checkpoint_key),
        f(m.resume_from), f(m.checkpoint_interval_s);
  } else if constexpr (std::is_same_v<T, InputAt>) {
    f(m.index), f(m.object), f(m.held), f(m.here), f(m.ucx_address), f(m.bytes);
  } else if constexpr (std::is_same_v<T, Tasks>) {
    f(m.lease_id), f(m.lease), f(m.tasks);
  } else if constexpr (std::is_same_v<T, StopLease>) {
    uint64_t why = static_cast<uint64_t>(m.why);
    f(m.lease_id), f(why), f(m.deadline_s);
    if constexpr (!std::is_const_v<M>) {
      if (why > static_cast<uint64_t>(StopLease::Why::kShutdown)) throw Error(ErrorCode::kDataLoss, "unknown stop reason");
      m.why = static_cast<StopLease::Why>(why);
    }
  } else if constexpr (std::is_same_v<T, Outcome>) {
    f(m.id), f(m.kind), f(m.value), f(m.code), f(m.message), f(m.cause), f(m.location), f(m.busy_gpu_micros),
        f(m.lost_gpu_micros), f(m.system_failure), f(m.resume_note), f(m.held), f(m.held_own_refs), f(m.held_bytes);
  } else if constexpr (std::is_same_v<T, Log>) {
    f(m.is_stderr), f(m.line);
  } else if constexpr (std::is_same_v<T, Checkpointed>) {
    f(m.lease_id), f(m.task_key), f(m.version), f(m.step), f(m.path);
  } else if constexpr (std::is_same_v<T, Fetch>) {
    f(m.request), f(m.object), f(m.through_driver), f(m.for_input);
  } else if constexpr (std::is_same_v<T, FetchFrom>) {
    f(m.request), f(m.at);
  } else if constexpr (std::is_same_v<T, Fetched>) {
    f(m.request), f(m.pending), f(m.code), f(m.message), f(m.value);
  } else if constexpr (std::is_same_v<T, Submit>) {
    f(m.request), f(m.function), f(m.args), f(m.options), f(m.deps), f(m.nested), f(m.inline_deps),
        f(m.inline_dep_values), f(m.inline_nested), f(m.inline_nested_values), f(m.inline_refs);
  } else if constexpr (std::is_same_v<T, Submitted>) {
    f(m.request), f(m.object), f(m.code), f(m.message);
  } else if constexpr (std::is_same_v<T, Release>) {
    f(m.object), f(m.count), f(m.read), f(m.refs_read);
  } else if constexpr (std::is_same_v<T, Borrow>) {
    f(m.object);
  } else if constexpr (std::is_same_v<T, ObjectsAt>) {
    f(m.ucx_address);
  }
}

}  // namespace gpupool::runtime::wire

namespace gpupool {

// The nested messages, for vectors of them.
template <typename T>
struct WireCodec {
  static void Encode(Writer& w, const T& m) {
    runtime::wire::Fields(m, [&](const auto& field) { gpupool::Encode(w, field); });
  }
  static T Decode(Reader& r) {
    T m;
    runtime::wire::Fields(m, [&](auto& field) { field = gpupool::Decode<std::decay_t<decltype(field)>>(r); });
    return m;
  }
};
template <>
struct Codec<runtime::wire::InputAt> : WireCodec<runtime::wire::InputAt> {};
template <>
struct Codec<runtime::wire::TaskToRun> : WireCodec<runtime::wire::TaskToRun> {};
template <>
struct Codec<runtime::wire::Outcome> : WireCodec<runtime::wire::Outcome> {};

}  // namespace gpupool

namespace gpupool::runtime::wire {
namespace {

// `reserve`: about the bytes it will take (WireBytes), so a frame of big values is written into
// one allocation instead of growing through copies of itself.
template <typename M>
std::string EncodeAs(Kind kind, const M& m, size_t reserve = 0) {
  std::string out;
  out.reserve(reserve);
  Writer w(out);
  w.Varint(static_cast<uint64_t>(kind));
  Codec<M>::Encode(w, m);
  return out;
}

std::string Bare(Kind kind) {
  std::string out;
  Writer w(out);
  w.Varint(static_cast<uint64_t>(kind));
  return out;
}

template <typename M>
absl::StatusOr<M> DecodeAs(Kind kind, std::string_view frame, const char* what) {
  try {
    Reader r(frame);
    uint64_t got = r.Varint("a message kind");
    if (got != static_cast<uint64_t>(kind)) {
      return absl::DataLossError(absl::StrCat("expected a ", what, " message, got kind ", got));
    }
    M m = Codec<M>::Decode(r);
    if (r.remaining() != 0) return absl::DataLossError(absl::StrCat(r.remaining(), " stray bytes after a ", what, " message"));
    return m;
  } catch (const Error& e) {
    return absl::DataLossError(absl::StrCat("malformed ", what, " message: ", e.what()));
  }
}

}  // namespace
}  // namespace gpupool::runtime::wire

namespace gpupool {
template <>
struct Codec<runtime::wire::Hello> : WireCodec<runtime::wire::Hello> {};
template <>
struct Codec<runtime::wire::Welcome> : WireCodec<runtime::wire::Welcome> {};
template <>
struct Codec<runtime::wire::Tasks> : WireCodec<runtime::wire::Tasks> {};
template <>
struct Codec<runtime::wire::StopLease> : WireCodec<runtime::wire::StopLease> {};
template <>
struct Codec<runtime::wire::Log> : WireCodec<runtime::wire::Log> {};
template <>
struct Codec<runtime::wire::Checkpointed> : WireCodec<runtime::wire::Checkpointed> {};
template <>
struct Codec<runtime::wire::Fetch> : WireCodec<runtime::wire::Fetch> {};
template <>
struct Codec<runtime::wire::Fetched> : WireCodec<runtime::wire::Fetched> {};
template <>
struct Codec<runtime::wire::Release> : WireCodec<runtime::wire::Release> {};
template <>
struct Codec<runtime::wire::Borrow> : WireCodec<runtime::wire::Borrow> {};
template <>
struct Codec<runtime::wire::ObjectsAt> : WireCodec<runtime::wire::ObjectsAt> {};
template <>
struct Codec<runtime::wire::FetchFrom> : WireCodec<runtime::wire::FetchFrom> {};
template <>
struct Codec<runtime::wire::Submit> : WireCodec<runtime::wire::Submit> {};
template <>
struct Codec<runtime::wire::Submitted> : WireCodec<runtime::wire::Submitted> {};
template <>
struct Codec<runtime::wire::Challenge> : WireCodec<runtime::wire::Challenge> {};
template <>
struct Codec<runtime::wire::Proof> : WireCodec<runtime::wire::Proof> {};
}  // namespace gpupool

namespace gpupool::runtime::wire {
namespace {
// About the bytes a whole frame of these encodes to (defined with the per-item ones below).
size_t WireBytes(const Tasks& m);
size_t WireBytes(const std::vector<Outcome>& m);
}  // namespace

std::string Encode(const Hello& m) { return EncodeAs(Kind::kHello, m); }
std::string Encode(const Welcome& m) { return EncodeAs(Kind::kWelcome, m); }
std::string Encode(const Tasks& m) { return EncodeAs(Kind::kTasks, m, WireBytes(m)); }
std::string Encode(const StopLease& m) { return EncodeAs(Kind::kStopLease, m); }
std::string EncodeStop() { return Bare(Kind::kStop); }
std::string Encode(const std::vector<Outcome>& m) { return EncodeAs(Kind::kOutcomes, m, WireBytes(m)); }
std::string Encode(const Log& m) { return EncodeAs(Kind::kLog, m); }
std::string Encode(const Checkpointed& m) { return EncodeAs(Kind::kCheckpointed, m); }
std::string EncodeBye() { return Bare(Kind::kBye); }
std::string Encode(const Fetch& m) { return EncodeAs(Kind::kFetch, m); }
std::string Encode(const Fetched& m) { return EncodeAs(Kind::kFetched, m); }
std::string Encode(const Release& m) { return EncodeAs(Kind::kRelease, m); }
std::string Encode(const Borrow& m) { return EncodeAs(Kind::kBorrow, m); }
std::string Encode(const ObjectsAt& m) { return EncodeAs(Kind::kObjectsAt, m); }
std::string Encode(const FetchFrom& m) { return EncodeAs(Kind::kFetchFrom, m); }
std::string Encode(const Submit& m) { return EncodeAs(Kind::kSubmit, m, WireBytes(m)); }
std::string Encode(const Submitted& m) { return EncodeAs(Kind::kSubmitted, m); }
std::string Encode(const Challenge& m) { return EncodeAs(Kind::kChallenge, m); }
std::string Encode(const Proof& m) { return EncodeAs(Kind::kProof, m); }

std::string ProtocolMismatch(const char* other, uint64_t theirs, const char* self) {
  const uint64_t ours = kProtocol;
  return absl::StrCat(other, " speaks worker protocol ", theirs, " and ", self, " ", ours,
                      ": run the same gpupool build on the driver and on every node");
}

absl::StatusOr<uint64_t> ProtocolOf(std::string_view frame) {
  try {
    Reader r(frame);
    (void)r.Varint("a message kind");
    return gpupool::Decode<uint64_t>(r);
  } catch (const Error& e) {
    return absl::DataLossError(absl::StrCat("no protocol in this message: ", e.what()));
  }
}

absl::StatusOr<Kind> KindOf(std::string_view frame) {
  try {
    Reader r(frame);
    uint64_t k = r.Varint("a message kind");
    if (k < static_cast<uint64_t>(Kind::kHello) || k > static_cast<uint64_t>(Kind::kProof)) {
      return absl::DataLossError(absl::StrCat("unknown message kind ", k));
    }
    return static_cast<Kind>(k);
  } catch (const Error& e) {
    return absl::DataLossError(absl::StrCat("malformed message: ", e.what()));
  }
}

absl::StatusOr<Hello> DecodeHello(std::string_view f) { return DecodeAs<Hello>(Kind::kHello, f, "hello"); }
absl::StatusOr<Welcome> DecodeWelcome(std::string_view f) { return DecodeAs<Welcome>(Kind::kWelcome, f, "welcome"); }
absl::StatusOr<Tasks> DecodeTasks(std::string_view f) { return DecodeAs<Tasks>(Kind::kTasks, f, "tasks"); }
absl::StatusOr<StopLease> DecodeStopLease(std::string_view f) { return DecodeAs<StopLease>(Kind::kStopLease, f, "stop-lease"); }
absl::StatusOr<std::vector<Outcome>> DecodeOutcomes(std::string_view f) {
  return DecodeAs<std::vector<Outcome>>(Kind::kOutcomes, f, "outcomes");
}
absl::StatusOr<Log> DecodeLog(std::string_view f) { return DecodeAs<Log>(Kind::kLog, f, "log"); }
absl::StatusOr<Checkpointed> DecodeCheckpointed(std::string_view f) {
  return DecodeAs<Checkpointed>(Kind::kCheckpointed, f, "checkpointed");
}
absl::StatusOr<Fetch> DecodeFetch(std::string_view f) { return DecodeAs<Fetch>(Kind::kFetch, f, "fetch"); }
absl::StatusOr<Fetched> DecodeFetched(std::string_view f) { return DecodeAs<Fetched>(Kind::kFetched, f, "fetched"); }
absl::StatusOr<Release> DecodeRelease(std::string_view f) { return DecodeAs<Release>(Kind::kRelease, f, "release"); }
absl::StatusOr<Borrow> DecodeBorrow(std::string_view f) { return DecodeAs<Borrow>(Kind::kBorrow, f, "borrow"); }
absl::StatusOr<ObjectsAt> DecodeObjectsAt(std::string_view f) {
  return DecodeAs<ObjectsAt>(Kind::kObjectsAt, f, "objects-at");
}
absl::StatusOr<FetchFrom> DecodeFetchFrom(std::string_view f) {
  return DecodeAs<FetchFrom>(Kind::kFetchFrom, f, "fetch-from");
}
absl::StatusOr<Submit> DecodeSubmit(std::string_view f) { return DecodeAs<Submit>(Kind::kSubmit, f, "submit"); }
absl::StatusOr<Submitted> DecodeSubmitted(std::string_view f) {
  return DecodeAs<Submitted>(Kind::kSubmitted, f, "submitted");
}
absl::StatusOr<Challenge> DecodeChallenge(std::string_view f) {
  return DecodeAs<Challenge>(Kind::kChallenge, f, "challenge");
}
absl::StatusOr<Proof> DecodeProof(std::string_view f) { return DecodeAs<Proof>(Kind::kProof, f, "proof"); }

std::string EncodeFetchedBox(uint64_t request, const detail::ValueBox& value) {
  std::string scratch;
  std::string_view bytes;
  if (const std::string* encoded = detail::EncodedBytesOf(value)) {
    bytes = *encoded;
  } else {
    value.EncodeTo(scratch);
    bytes = scratch;
  }
  // Fetched's fields in order (Fields above), the value's string written from the view.
  std::string out;
  out.reserve(64 + bytes.size());
  Writer w(out);
  w.Varint(static_cast<uint64_t>(Kind::kFetched));
  gpupool::Encode(w, request);
  gpupool::Encode(w, false);
  gpupool::Encode(w, int64_t{0});
  gpupool::Encode(w, std::string());
  w.Varint(bytes.size());
  w.Bytes(bytes.data(), bytes.size());
  return out;
}

std::string AnswerFetch(uint64_t request, detail::ObjectHeader* object, bool* sent_value) {
  Fetched failed{.request = request};
  try {
    std::string frame = EncodeFetchedBox(request, detail::AwaitValue(object, std::chrono::steady_clock::now()));
    if (frame.size() <= kMaxWorkerFrameBytes) {
      *sent_value = true;
      return frame;
    }
    failed.code = static_cast<int64_t>(ErrorCode::kResourceExhausted);
    failed.message = absl::StrCat("its value, ", frame.size(), " bytes encoded, is over the ", kMaxWorkerFrameBytes,
                                  " bytes one frame between a driver and its workers may hold");
  } catch (const Error& e) {  // its failure, or a value that cannot be encoded
    failed.code = static_cast<int64_t>(e.code());
    failed.message = e.what();
  } catch (const std::exception& e) {  // a user's codec: never out of the thread answering
    failed.code = static_cast<int64_t>(ErrorCode::kInternal);
    failed.message = absl::StrCat("its value could not be encoded: ", e.what());
  } catch (...) {
    failed.code = static_cast<int64_t>(ErrorCode::kInternal);
    failed.message = "its value could not be encoded: its codec threw something other than an exception";
  }
  *sent_value = false;
  return Encode(failed);
}

absl::StatusOr<FetchedView> DecodeFetchedView(std::string_view frame) {
  try {
    Reader r(frame);
    uint64_t got = r.Varint("a message kind");
    if (got != static_cast<uint64_t>(Kind::kFetched)) {
      return absl::DataLossError(absl::StrCat("expected a fetched message, got kind ", got));
    }
    FetchedView m;
    m.request = gpupool::Decode<uint64_t>(r);
    m.pending = gpupool::Decode<bool>(r);
    m.code = gpupool::Decode<int64_t>(r);
    m.message = gpupool::Decode<std::string>(r);
    m.value = r.Take(r.Count("a string"), "a string");
    if (r.remaining() != 0) return absl::DataLossError(absl::StrCat(r.remaining(), " stray bytes after a fetched message"));
    return m;
  } catch (const Error& e) {
    return absl::DataLossError(absl::StrCat("malformed fetched message: ", e.what()));
  }
}

// Generous per-field overheads (varints and counts) beside the fields' bytes.
size_t WireBytes(const TaskToRun& t) {
  size_t n = 64 + t.function.size() + t.args.size() + t.options.size() + t.checkpoint_key.size() + t.resume_from.size();
  for (const std::string& input : t.inputs) n += 10 + input.size();
  for (const InputAt& at : t.inputs_at) n += 48 + at.ucx_address.size();
  return n;
}

size_t WireBytes(const Outcome& o) {
  return 96 + o.value.size() + o.message.size() + o.cause.size() + o.location.size() + o.resume_note.size();
}

size_t WireBytes(const Submit& m) {
  size_t n = 64 + m.function.size() + m.args.size() + m.options.size() +
             10 * (m.deps.size() + m.nested.size() + m.inline_deps.size() + m.inline_nested.size() + m.inline_refs.size());
  for (const auto* values : {&m.inline_dep_values, &m.inline_nested_values}) {
    for (const std::string& v : *values) n += 10 + v.size();
  }
  return n;
}

namespace {

constexpr size_t kTasksOverhead = 64;     // a Tasks frame's own fields, beside its lease id and lease
constexpr size_t kOutcomesOverhead = 16;  // an Outcomes frame's own

size_t WireBytes(const Tasks& m) {
  size_t n = kTasksOverhead + m.lease_id.size() + m.lease.size();
  for (const TaskToRun& t : m.tasks) n += WireBytes(t);
  return n;
}

size_t WireBytes(const std::vector<Outcome>& m) {
  size_t n = kOutcomesOverhead;
  for (const Outcome& o : m) n += WireBytes(o);
  return n;
}

}  // namespace

namespace {

// `items`, in order, as runs whose bytes stay within `limit` with `first_overhead` (the first
// run's frame) or `overhead` (the others') beside them; an item too big for any run gets one of
// its own. Moves the items out.
template <typename T>
std::vector<std::vector<T>> SplitByBytes(std::vector<T>& items, size_t first_overhead, size_t overhead, size_t limit) {
  std::vector<std::vector<T>> runs(1);
  size_t bytes = first_overhead;
  for (T& item : items) {
    const size_t b = WireBytes(item);
    if (!runs.back().empty() && bytes + b > limit) {
      runs.emplace_back();
      bytes = overhead;
    }
    bytes += b;
    runs.back().push_back(std::move(item));
  }
  return runs;
}

}  // namespace

std::vector<std::string> EncodeTaskFrames(Tasks& message, size_t limit) {
  const size_t overhead = kTasksOverhead + message.lease_id.size();
  if (const size_t bytes = WireBytes(message); bytes <= limit) return {EncodeAs(Kind::kTasks, message, bytes)};
  std::vector<std::string> frames;
  for (std::vector<TaskToRun>& run : SplitByBytes(message.tasks, overhead + message.lease.size(), overhead, limit)) {
    // The lease goes with the first frame only: the worker has it from then on.
    frames.push_back(Encode(Tasks{.lease_id = message.lease_id, .lease = frames.empty() ? message.lease : "",
                                  .tasks = std::move(run)}));
  }
  return frames;
}

std::vector<std::string> EncodeOutcomeFrames(std::vector<Outcome>& outcomes, size_t limit) {
  constexpr size_t kFrameOverhead = kOutcomesOverhead;
  size_t bytes = kFrameOverhead;
  for (Outcome& o : outcomes) {
    if (kFrameOverhead + WireBytes(o) > limit) {
      const size_t size = o.value.size() + o.cause.size() + o.message.size();
      o.value.clear();
      o.cause.clear();
      o.resume_note.clear();
      o.kind = static_cast<uint64_t>(RunOutcome::Kind::kFailed);
      o.code = static_cast<int64_t>(ErrorCode::kResourceExhausted);
      o.message = absl::StrCat("its result, ", size, " bytes, is over the ", limit,
                               " bytes a worker may send its driver for one task");
      o.message.resize(std::min(o.message.size(), limit / 2));
    }
    bytes += WireBytes(o);
  }
  if (bytes <= limit) return {EncodeAs(Kind::kOutcomes, outcomes, bytes)};
  std::vector<std::string> frames;
  for (const std::vector<Outcome>& run : SplitByBytes(outcomes, kFrameOverhead, kFrameOverhead, limit)) {
    frames.push_back(Encode(run));
  }
  return frames;
}

}  // namespace gpupool::runtime::wire
