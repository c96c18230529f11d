#include "runtime/rpc/label_codec.h"
#include "runtime/rpc/lease_codec.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "capnp/message.h"
#include "capnp/serialize.h"

namespace gpupool::rpc {
namespace {

absl::StatusOr<std::string> Text(capnp::Text::Reader t, const char* field) {
  if (t.size() > kMaxTextBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is ", t.size(), " bytes; at most ", kMaxTextBytes, " are allowed"));
  }
  return std::string(t.cStr(), t.size());
}

// A list of texts, each bounded, the list too: `list` and `item` name them in errors.
absl::Status Texts(capnp::List<capnp::Text>::Reader in, const char* list, const char* item,
                   std::vector<std::string>& out) {
  if (in.size() > kMaxListEntries) {
    return absl::InvalidArgumentError(absl::StrCat(list, " has ", in.size(), " entries; at most ", kMaxListEntries));
  }
  for (capnp::Text::Reader t : in) {
    absl::StatusOr<std::string> v = Text(t, item);
    if (!v.ok()) return v.status();
    out.push_back(*std::move(v));
  }
  return absl::OkStatus();
}

absl::Status Labels(capnp::List<Label>::Reader in, const char* field,
                    std::map<std::string, std::string>& out) {
  if (in.size() > kMaxListEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", in.size(), " entries; at most ", kMaxListEntries));
  }
  for (Label::Reader l : in) {
    absl::StatusOr<std::string> k = Text(l.getKey(), field);
    if (!k.ok()) return k.status();
    absl::StatusOr<std::string> v = Text(l.getValue(), field);
    if (!v.ok()) return v.status();
    out[*std::move(k)] = *std::move(v);
  }
  return absl::OkStatus();
}

}  // namespace

void EncodeLeaseRequest(const pool::LeaseRequest& r, LeaseRequest::Builder out) {
  out.setId(r.id);
  out.setTeam(r.team);
  out.setProject(r.project);
  out.setWorkloadClass(r.workload_class);
  out.setPriorityClass(r.priority_class);
  out.setSlotCount(r.slot_count);
  SlotShape::Builder s = out.initSlot();
  s.setKind(static_cast<SlotKind>(r.slot.kind));
  s.setMigProfile(r.slot.mig_profile);
  s.setMpsThreadPercentage(r.slot.mps_thread_percentage);
  s.setMemoryMib(r.slot.memory_mib);
  s.setComputeMilli(r.slot.compute_milli);
  s.setCpuMilli(r.slot.cpu_milli);
  s.setHostMemoryMib(r.slot.host_memory_mib);
  auto models = out.initAllowedModels(r.allowed_models.size());
  for (size_t i = 0; i < r.allowed_models.size(); ++i) models.set(i, r.allowed_models[i]);
  EncodeLabels(r.required_labels, out.initRequiredLabels(r.required_labels.size()));
  EncodeLabels(r.forbidden_labels, out.initForbiddenLabels(r.forbidden_labels.size()));
  out.setMinGpuMemoryMib(r.min_gpu_memory_mib);
  out.setNvlinkRequired(r.nvlink_required);
  out.setTopology(static_cast<GangTopology>(r.topology));
  out.setHardwareIsolation(r.hardware_isolation);
  out.setHasRuntimeEstimate(r.runtime_estimate_s.has_value());
  out.setRuntimeEstimateS(r.runtime_estimate_s.value_or(0));
  auto preferred = out.initPreferredNodes(r.preferred_nodes.size());
  for (size_t i = 0; i < r.preferred_nodes.size(); ++i) preferred.set(i, r.preferred_nodes[i]);
}

absl::StatusOr<pool::LeaseRequest> DecodeLeaseRequest(LeaseRequest::Reader in) {
  pool::LeaseRequest r;
  struct {
    capnp::Text::Reader from;
    std::string* to;
    const char* name;
  } texts[] = {{in.getId(), &r.id, "request id"},
               {in.getTeam(), &r.team, "team"},
               {in.getProject(), &r.project, "project"},
               {in.getWorkloadClass(), &r.workload_class, "workload class"},
               {in.getPriorityClass(), &r.priority_class, "priority class"}};
  for (auto& t : texts) {
    absl::StatusOr<std::string> v = Text(t.from, t.name);
    if (!v.ok()) return v.status();
    *t.to = *std::move(v);
  }
  r.slot_count = in.getSlotCount();
  SlotShape::Reader s = in.getSlot();
  if (static_cast<unsigned>(s.getKind()) > static_cast<unsigned>(SlotKind::FRACTION)) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot kind ", static_cast<unsigned>(s.getKind()), " is unknown"));
  }
  r.slot.kind = static_cast<pool::SlotKind>(s.getKind());
  absl::StatusOr<std::string> mig = Text(s.getMigProfile(), "MIG profile");
  if (!mig.ok()) return mig.status();
  r.slot.mig_profile = *std::move(mig);
  r.slot.mps_thread_percentage = s.getMpsThreadPercentage();
  r.slot.memory_mib = s.getMemoryMib();
  r.slot.compute_milli = s.getComputeMilli();
  r.slot.cpu_milli = s.getCpuMilli();
  r.slot.host_memory_mib = s.getHostMemoryMib();
  if (absl::Status st = Texts(in.getAllowedModels(), "allowed models", "allowed model", r.allowed_models); !st.ok()) {
    return st;
  }
  if (absl::Status st = Labels(in.getRequiredLabels(), "required labels", r.required_labels); !st.ok()) {
    return st;
  }
  if (absl::Status st = Labels(in.getForbiddenLabels(), "forbidden labels", r.forbidden_labels); !st.ok()) {
    return st;
  }
  r.min_gpu_memory_mib = in.getMinGpuMemoryMib();
  r.nvlink_required = in.getNvlinkRequired();
  if (static_cast<unsigned>(in.getTopology()) > static_cast<unsigned>(GangTopology::SAME_NV_LINK_ISLAND)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gang topology ", static_cast<unsigned>(in.getTopology()), " is unknown"));
  }
  r.topology = static_cast<pool::GangTopology>(in.getTopology());
  r.hardware_isolation = in.getHardwareIsolation();
  if (in.getHasRuntimeEstimate()) r.runtime_estimate_s = in.getRuntimeEstimateS();
  if (absl::Status st = Texts(in.getPreferredNodes(), "preferred nodes", "preferred node", r.preferred_nodes);
      !st.ok()) {
    return st;
  }
  return r;
}

void EncodeLease(const pool::Lease& l, Lease::Builder out) {
  out.setId(l.id);
  EncodeLeaseRequest(l.request, out.initRequest());
  auto gpus = out.initGpus(l.gpus.size());
  for (size_t i = 0; i < l.gpus.size(); ++i) {
    gpus[i].setNode(l.gpus[i].node);
    gpus[i].setIndex(l.gpus[i].index);
  }
  out.setGroup(l.group);
  out.setMilli(l.milli);
  out.setBorrowing(l.borrowing);
  out.setStartedS(l.started_s);
  out.setLastCheckpointS(l.last_checkpoint_s);
  out.setHasRevokeDeadline(l.revoke_deadline_s.has_value());
  out.setRevokeDeadlineS(l.revoke_deadline_s.value_or(0));
  out.setRevokedFor(l.revoked_for);
  out.setHasGuaranteedWait(l.guaranteed_wait_s.has_value());
  out.setGuaranteedWaitS(l.guaranteed_wait_s.value_or(0));
}

absl::StatusOr<pool::Lease> DecodeLease(Lease::Reader in) {
  pool::Lease l;
  absl::StatusOr<std::string> id = Text(in.getId(), "lease id");
  if (!id.ok()) return id.status();
  l.id = *std::move(id);
  absl::StatusOr<pool::LeaseRequest> r = DecodeLeaseRequest(in.getRequest());
  if (!r.ok()) return r.status();
  l.request = *std::move(r);
  if (in.getGpus().size() > static_cast<unsigned>(pool::kMaxSlotsPerRequest)) {
    return absl::InvalidArgumentError(absl::StrCat("lease has ", in.getGpus().size(), " GPUs"));
  }
  for (GpuRef::Reader g : in.getGpus()) {
    absl::StatusOr<std::string> node = Text(g.getNode(), "GPU node");
    if (!node.ok()) return node.status();
    l.gpus.push_back(pool::GpuRef{*std::move(node), g.getIndex()});
  }
  absl::StatusOr<std::string> group = Text(in.getGroup(), "lease group");
  if (!group.ok()) return group.status();
  l.group = *std::move(group);
  l.milli = in.getMilli();
  l.borrowing = in.getBorrowing();
  l.started_s = in.getStartedS();
  l.last_checkpoint_s = in.getLastCheckpointS();
  if (in.getHasRevokeDeadline()) l.revoke_deadline_s = in.getRevokeDeadlineS();
  absl::StatusOr<std::string> revoked_for = Text(in.getRevokedFor(), "revoked for");
  if (!revoked_for.ok()) return revoked_for.status();
  l.revoked_for = *std::move(revoked_for);
  if (in.getHasGuaranteedWait()) l.guaranteed_wait_s = in.getGuaranteedWaitS();
  return l;
}

RevokeCause EncodeRevokeCause(pool::RevokeCause cause) {
  switch (cause) {
    case pool::RevokeCause::kReclaim: return RevokeCause::RECLAIM;
    case pool::RevokeCause::kPriority: return RevokeCause::PRIORITY;
    case pool::RevokeCause::kDrain: return RevokeCause::DRAIN;
    case pool::RevokeCause::kMove: return RevokeCause::MOVE;
  }
  return RevokeCause::RECLAIM;
}

pool::RevokeCause DecodeRevokeCause(RevokeCause cause) {
  switch (cause) {
    case RevokeCause::PRIORITY: return pool::RevokeCause::kPriority;
    case RevokeCause::DRAIN: return pool::RevokeCause::kDrain;
    case RevokeCause::MOVE: return pool::RevokeCause::kMove;
    default: return pool::RevokeCause::kReclaim;
  }
}

namespace {

// One value as a self-contained Cap'n Proto message, and back (`what` names it in errors).
template <typename Schema, typename Value, typename Encode>
std::string ToBytes(const Value& value, Encode encode) {
  capnp::MallocMessageBuilder message;
  encode(value, message.initRoot<Schema>());
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  kj::ArrayPtr<const char> bytes = words.asChars();
  return std::string(bytes.begin(), bytes.end());
}

template <typename Schema, typename Value, typename Decode>
absl::StatusOr<Value> FromBytes(absl::string_view bytes, const char* what, Decode decode) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0 ||
      bytes.size() > kMaxMessageWords * sizeof(capnp::word)) {
    return absl::InvalidArgumentError(absl::StrCat("a stored ", what, " of ", bytes.size(),
                                                   " bytes is not one message of whole 8-byte words"));
  }
  // Word-aligned storage: the caller's bytes may not be.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  memcpy(words.begin(), bytes.data(), bytes.size());
  absl::StatusOr<Value> value = absl::InternalError("not decoded");
  kj::Maybe<kj::Exception> failure = kj::runCatchingExceptions([&]() {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = kMaxMessageWords;
    capnp::FlatArrayMessageReader reader(words, options);
    value = decode(reader.getRoot<Schema>());
  });
  KJ_IF_MAYBE(e, failure) {
    return absl::InvalidArgumentError(absl::StrCat("malformed stored ", what, ": ", e->getDescription().cStr()));
  }
  return value;
}

}  // namespace

std::string LeaseToBytes(const pool::Lease& l) {
  return ToBytes<Lease>(l, [](const pool::Lease& v, Lease::Builder out) { EncodeLease(v, out); });
}

absl::StatusOr<pool::Lease> LeaseFromBytes(absl::string_view bytes) {
  return FromBytes<Lease, pool::Lease>(bytes, "lease", [](Lease::Reader in) { return DecodeLease(in); });
}

std::string LeaseRequestToBytes(const pool::LeaseRequest& r) {
  return ToBytes<LeaseRequest>(r, [](const pool::LeaseRequest& v, LeaseRequest::Builder out) {
    EncodeLeaseRequest(v, out);
  });
}

absl::StatusOr<pool::LeaseRequest> LeaseRequestFromBytes(absl::string_view bytes) {
  return FromBytes<LeaseRequest, pool::LeaseRequest>(bytes, "lease request",
                                                     [](LeaseRequest::Reader in) { return DecodeLeaseRequest(in); });
}

void EncodeStatus(const absl::Status& s, Status::Builder out) {
  out.setCode(static_cast<uint32_t>(s.code()));
  out.setMessage(std::string(s.message()));
}

absl::Status DecodeStatus(Status::Reader in) {
  uint32_t code = in.getCode();
  if (code == 0) return absl::OkStatus();
  std::string message(in.getMessage().cStr(), std::min<size_t>(in.getMessage().size(), kMaxTextBytes));
  if (code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnknownError(absl::StrCat("status code ", code, ": ", message));
  }
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

}  // namespace gpupool::rpc
