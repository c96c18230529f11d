#include "transport/ucx_worker.h"

#include <poll.h>
#include <sched.h>
#include <ucp/api/ucp.h>

#include <cassert>
#include <cstdio>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace gpupool::transport {

struct UcxWorker::Peer {
  UcxWorker* worker;
  PeerId id;
  std::string name;
  std::string address;
  ucp_ep_h ep = nullptr;  // null once closed
  absl::Status failure;   // OK while usable
};

// One UCX request in flight: what to call when it completes, and what must outlive it.
struct UcxWorker::Op {
  UcxWorker* worker;
  std::string what;    // names the operation and its peer in errors
  std::string header;  // UCX 1.13 reads an AM header until the send completes
  OpDone done;
};

struct UcxWorker::AmSlot {
  UcxWorker* worker;
  AmHandler handler;
};

// UCX's C callbacks; they only translate arguments and forward to the worker.
struct UcxCallbacks {
  static void Send(void* request, ucs_status_t status, void* user_data) {
    auto* op = static_cast<UcxWorker::Op*>(user_data);
    ucp_request_free(request);
    op->worker->Complete(op, status == UCS_OK
                                 ? absl::OkStatus()
                                 : absl::UnavailableError(absl::StrCat(
                                       op->what, ": ", ucs_status_string(status))));
  }
  static void ReceiveData(void* request, ucs_status_t status, size_t /*length*/,
                          void* user_data) {
    Send(request, status, user_data);
  }
  static void EndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
    auto* peer = static_cast<UcxWorker::Peer*>(arg);
    peer->worker->OnEndpointError(
        *peer, absl::UnavailableError(absl::StrCat("UCX peer '", peer->name,
                                                   "' failed: ", ucs_status_string(status))));
  }
  static ucs_status_t Am(void* arg, const void* header, size_t header_length, void* data,
                         size_t length, const ucp_am_recv_param_t* param) {
    auto* slot = static_cast<UcxWorker::AmSlot*>(arg);
    AmMessage message;
    message.header_ = absl::string_view(static_cast<const char*>(header), header_length);
    message.data_ = data;
    message.data_size_ = length;
    message.rendezvous_ = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) message.reply_ep_ = param->reply_ep;
    if (!slot->handler) return UCS_OK;  // no protocol listens on this id (yet, or any more)
    slot->handler(message);
    // A claimed rendezvous descriptor now belongs to ucp_am_recv_data_nbx; an unclaimed one is
    // dropped by returning OK (the sender's send completes).
    return message.claimed_ ? UCS_INPROGRESS : UCS_OK;
  }
};

namespace {

// The UCX_TLS value for UcxOptions::transports.
std::string TransportList(const std::string& transports) {
  if (transports == "tcp") return "tcp,self";
  if (transports == "shm") return "sysv,posix,cma,self";
  return absl::StrCat(transports, ",self");
}

absl::Status UcxError(absl::string_view what, ucs_status_t status) {
  return absl::UnavailableError(absl::StrCat("UCX: ", what, ": ", ucs_status_string(status)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<UcxWorker>> UcxWorker::Create(UcxOptions options) {
  std::unique_ptr<UcxWorker> worker(new UcxWorker(std::move(options)));
  if (absl::Status s = worker->Init(); !s.ok()) return s;
  UcxWorker* w = worker.get();
  absl::Notification started;
  worker->loop_thread_ = std::thread([w, &started] {
    w->loop_thread_id_ = std::this_thread::get_id();
    started.Notify();
    w->Loop();
  });
  started.WaitForNotification();
  return worker;
}

UcxWorker::UcxWorker(UcxOptions options) : options_(std::move(options)) {}

absl::Status UcxWorker::Init() {
  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) {
    return UcxError("reading configuration", s);
  }
  ucs_status_t s = UCS_OK;
  if (options_.transports != "default" && !options_.transports.empty()) {
    s = ucp_config_modify(config, "TLS", TransportList(options_.transports).c_str());
  }
  if (s == UCS_OK && !options_.net_devices.empty()) {
    s = ucp_config_modify(config, "NET_DEVICES", options_.net_devices.c_str());
  }
  if (s != UCS_OK) {
    ucp_config_release(config);
    return UcxError(absl::StrCat("configuring transports '", options_.transports,
                                 "' on devices '", options_.net_devices, "'"),
                    s);
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = options_.name.c_str();
  s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) {
    context_ = nullptr;
    return UcxError(absl::StrCat("ucp_init with transports '", options_.transports, "'"), s);
  }
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the loop thread touches it
  if (s = ucp_worker_create(context_, &worker_params, &worker_); s != UCS_OK) {
    worker_ = nullptr;
    return UcxError("ucp_worker_create", s);
  }
  if (s = ucp_worker_get_efd(worker_, &event_fd_); s != UCS_OK) {
    return UcxError("ucp_worker_get_efd", s);
  }
  // Every id gets a UCX handler now, one that drops messages until SetAmHandler: UCX 1.13
  // crashes in ucp_am_handler on a message for an id that never had a handler.
  for (AmId am : {AmId::kFetchRequest, AmId::kFetchReply, AmId::kCollective, AmId::kObjectReceipt}) {
    unsigned id = static_cast<unsigned>(am);
    auto slot = std::make_unique<AmSlot>(AmSlot{this, nullptr});
    ucp_am_handler_param_t param{};
    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    param.id = id;
    param.cb = &UcxCallbacks::Am;
    param.arg = slot.get();
    param.flags = UCP_AM_FLAG_WHOLE_MSG;
    if (s = ucp_worker_set_am_recv_handler(worker_, &param); s != UCS_OK) {
      return UcxError("ucp_worker_set_am_recv_handler", s);
    }
    am_slots_[id] = std::move(slot);
  }
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  if (s = ucp_worker_query(worker_, &attr); s != UCS_OK) return UcxError("ucp_worker_query", s);
  max_am_header_ = attr.max_am_header;
  ucp_address_t* address = nullptr;
  size_t length = 0;
  if (s = ucp_worker_get_address(worker_, &address, &length); s != UCS_OK) {
    return UcxError("ucp_worker_get_address", s);
  }
  address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker_, address);
  return absl::OkStatus();
}

UcxWorker::~UcxWorker() {
  assert(!InLoopThread());
  if (loop_thread_.joinable()) {
    stop_requested_.store(true);
    ucp_worker_signal(worker_);
    loop_thread_.join();
  }
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

absl::StatusOr<PeerId> UcxWorker::Connect(absl::string_view address, absl::string_view peer_name) {
  if (address.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("UCX: empty worker address for peer '", peer_name, "'"));
  }
  absl::StatusOr<PeerId> result = absl::UnavailableError("UCX worker is shutting down");
  RunInLoop([&] {
    if (auto it = peer_by_address_.find(address); it != peer_by_address_.end()) {
      if (peers_.at(it->second)->failure.ok()) {
        result = it->second;
        return;
      }
    }
    auto peer = std::make_unique<Peer>();
    peer->worker = this;
    peer->id = next_peer_id_++;
    peer->name = std::string(peer_name);
    peer->address = std::string(address);
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.address = reinterpret_cast<const ucp_address_t*>(peer->address.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    if (options_.detect_peer_failure) {
      params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
      params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      params.err_handler.cb = &UcxCallbacks::EndpointError;
      params.err_handler.arg = peer.get();
    }
    if (ucs_status_t s = ucp_ep_create(worker_, &params, &peer->ep); s != UCS_OK) {
      result = UcxError(absl::StrCat("connecting to peer '", peer_name, "'"), s);
      return;
    }
    result = peer->id;
    peer_by_address_[peer->address] = peer->id;
    peers_[peer->id] = std::move(peer);
  });
  return result;
}

void UcxWorker::Post(absl::AnyInvocable<void() &&> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    posted_.push_back(std::move(fn));
    has_posted_.store(true, std::memory_order_release);
  }
  // The loop drains the queue before it next sleeps; only other threads need to wake it (a
  // signal is a syscall, and completions post from the loop thread once per operation).
  if (!InLoopThread()) ucp_worker_signal(worker_);
}

void UcxWorker::RunInLoop(absl::AnyInvocable<void() &&> fn) {
  assert(!InLoopThread());
  absl::Notification done;
  Post([&] {
    std::move(fn)();
    done.Notify();
  });
  // A closure refused because the worker is stopping never runs: only the destructor stops it,
  // and calling into an object being destroyed is the caller's bug.
  done.WaitForNotification();
}

void UcxWorker::SetAmHandler(AmId id, AmHandler handler) {
  RunInLoop([&] { am_slots_.at(static_cast<unsigned>(id))->handler = std::move(handler); });
}

void UcxWorker::ClearAmHandler(AmId id) {
  RunInLoop([&] { am_slots_.at(static_cast<unsigned>(id))->handler = nullptr; });
}

void UcxWorker::FailPeer(PeerId peer_id, absl::Status why) {
  Post([this, peer_id, why = std::move(why)] {
    auto it = peers_.find(peer_id);
    if (it == peers_.end() || !it->second->failure.ok()) return;
    OnEndpointError(*it->second, absl::UnavailableError(absl::StrCat(
                                     "UCX peer '", it->second->name, "' failed: ", why.message())));
  });
}

void UcxWorker::SendAm(PeerId peer_id, AmId id, std::string header, const void* data,
                       size_t size, bool reply, OpDone done) {
  assert(InLoopThread());
  auto* op = new Op{this, "", std::move(header), std::move(done)};
  auto it = peers_.find(peer_id);
  if (it == peers_.end()) {
    Complete(op, absl::InvalidArgumentError(absl::StrCat("UCX: no peer #", peer_id)));
    return;
  }
  Peer& peer = *it->second;
  op->what = absl::StrCat("UCX send to peer '", peer.name, "'");
  if (!peer.failure.ok()) {
    Complete(op, peer.failure);
    return;
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &UcxCallbacks::Send;
  param.user_data = op;
  param.flags = reply ? UCP_AM_SEND_FLAG_REPLY : 0;
  Submit(ucp_am_send_nbx(peer.ep, static_cast<unsigned>(id), op->header.data(),
                         op->header.size(), data, size, &param),
         op);
}

void UcxWorker::Reply(const AmMessage& message, AmId id, std::string header, const void* data,
                      size_t size, OpDone done) {
  assert(InLoopThread());
  auto* op = new Op{this, "UCX reply", std::move(header), std::move(done)};
  if (message.reply_ep_ == nullptr) {
    Complete(op, absl::FailedPreconditionError("UCX: message was sent without a reply endpoint"));
    return;
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &UcxCallbacks::Send;
  param.user_data = op;
  param.flags = size <= kEagerReplyMaxBytes ? UCP_AM_SEND_FLAG_EAGER : 0;
  Submit(ucp_am_send_nbx(message.reply_ep_, static_cast<unsigned>(id), op->header.data(),
                         op->header.size(), data, size, &param),
         op);
}

void UcxWorker::ReceiveAmData(AmMessage& message, void* dst, OpDone done) {
  assert(InLoopThread());
  assert(message.rendezvous_ && !message.claimed_);
  auto* op = new Op{this, "UCX rendezvous receive", "", std::move(done)};
  message.claimed_ = true;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv_am = &UcxCallbacks::ReceiveData;
  param.user_data = op;
  Submit(ucp_am_recv_data_nbx(worker_, message.data_, dst, message.data_size_, &param), op);
}

void UcxWorker::Submit(void* status_ptr, Op* op) {
  if (status_ptr == nullptr) {
    Complete(op, absl::OkStatus());
  } else if (UCS_PTR_IS_ERR(status_ptr)) {
    Complete(op, absl::UnavailableError(absl::StrCat(op->what, ": ",
                                                     ucs_status_string(UCS_PTR_STATUS(status_ptr)))));
  }
  // Otherwise UCX calls back (UcxCallbacks::Send / ReceiveData) from ucp_worker_progress.
}

void UcxWorker::Complete(Op* op, absl::Status status) {
  // Deferred through the posted queue so `done` never runs inside the call that started it.
  Post([op, status = std::move(status)]() mutable {
    std::unique_ptr<Op> owned(op);
    std::move(owned->done)(std::move(status));
  });
}

void UcxWorker::OnEndpointError(Peer& peer, absl::Status why) {
  if (!peer.failure.ok()) return;
  peer.failure = std::move(why);
  // Closed from the loop rather than inside UCX's error callback, which runs within progress.
  Post([this, &peer] {
    CloseEndpoint(peer);
    for (auto& [handle, listener] : failure_listeners_) listener(peer.id, peer.failure);
  });
}

// Force-close (a failed peer): UCX completes every request still on the endpoint with an error,
// so no send or receive waits on a dead peer, and releases the endpoint without asking the peer.
// Flush-close (a live peer, when this worker stops): what was sent is delivered first. A send
// completes once UCX holds the bytes, not once the peer has them, so forcing here could drop
// the last message a process sent before exiting (seen as a peer's broadcast failing with
// "Endpoint timeout" after the sender printed its result and left).
void UcxWorker::CloseEndpoint(Peer& peer, bool flush) {
  if (peer.ep == nullptr) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = flush ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
  void* request = ucp_ep_close_nbx(peer.ep, &param);
  peer.ep = nullptr;
  if (request != nullptr && !UCS_PTR_IS_ERR(request)) closing_requests_.push_back(request);
}

void UcxWorker::ReapClosedEndpoints() {
  std::erase_if(closing_requests_, [](void* request) {
    if (ucp_request_check_status(request) == UCS_INPROGRESS) return false;
    ucp_request_free(request);
    return true;
  });
}

uint64_t UcxWorker::AddPeerFailureListener(PeerFailureListener listener) {
  assert(InLoopThread());
  uint64_t handle = next_listener_++;
  failure_listeners_.emplace(handle, std::move(listener));
  return handle;
}

void UcxWorker::RemovePeerFailureListener(uint64_t handle) {
  assert(InLoopThread());
  failure_listeners_.erase(handle);
}

absl::Status UcxWorker::PeerStatus(PeerId peer) const {
  assert(InLoopThread());
  auto it = peers_.find(peer);
  if (it == peers_.end()) return absl::InvalidArgumentError(absl::StrCat("UCX: no peer #", peer));
  return it->second->failure;
}

std::string UcxWorker::PeerName(PeerId peer) const {
  assert(InLoopThread());
  auto it = peers_.find(peer);
  return it == peers_.end() ? absl::StrCat("#", peer) : it->second->name;
}

std::string UcxWorker::DescribePeer(PeerId peer) const {
  assert(InLoopThread());
  auto it = peers_.find(peer);
  if (it == peers_.end() || it->second->ep == nullptr) return "(closed)";
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return "(unavailable)";
  ucp_ep_print_info(it->second->ep, stream);
  std::fclose(stream);
  std::string result(text, size);
  std::free(text);
  return result;
}

uint64_t UcxWorker::AddTimer(absl::Time when, absl::AnyInvocable<void() &&> fn) {
  assert(InLoopThread());
  uint64_t handle = next_timer_++;
  timers_.emplace(std::make_pair(when, handle), std::move(fn));
  timer_deadlines_[handle] = when;
  return handle;
}

void UcxWorker::CancelTimer(uint64_t handle) {
  assert(InLoopThread());
  auto it = timer_deadlines_.find(handle);
  if (it == timer_deadlines_.end()) return;
  timers_.erase(std::make_pair(it->second, handle));
  timer_deadlines_.erase(it);
}

bool UcxWorker::RunPosted() {
  // The flag spares the idle loop a mutex round trip per pass.
  if (!has_posted_.load(std::memory_order_acquire)) return false;
  std::vector<absl::AnyInvocable<void() &&>> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(posted_);
    has_posted_.store(false, std::memory_order_relaxed);
  }
  for (auto& fn : batch) std::move(fn)();
  return !batch.empty();
}

bool UcxWorker::RunDueTimers() {
  bool ran = false;
  absl::Time now = absl::Now();
  while (!timers_.empty() && timers_.begin()->first.first <= now) {
    auto node = timers_.extract(timers_.begin());
    timer_deadlines_.erase(node.key().second);
    std::move(node.mapped())();
    ran = true;
  }
  return ran;
}

void UcxWorker::SleepUntilEvent() {
  // ucp_worker_arm refuses (BUSY) while events are pending; then progress again instead.
  if (ucp_worker_arm(worker_) != UCS_OK) return;
  {
    absl::MutexLock lock(&mu_);
    if (!posted_.empty()) return;
  }
  // Wake at least every 100 ms so UCX's keepalive (which detects peers that vanish without a
  // connection reset, e.g. across a network partition) keeps running.
  absl::Duration wait = absl::Milliseconds(100);
  if (!timers_.empty()) {
    wait = std::min(wait, std::max(absl::ZeroDuration(), timers_.begin()->first.first - absl::Now()));
  }
  pollfd fd{event_fd_, POLLIN, 0};
  poll(&fd, 1, static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(wait, absl::Milliseconds(1)))));
}

void UcxWorker::Loop() {
  std::optional<absl::Time> idle_since;
  while (!stop_requested_.load(std::memory_order_relaxed)) {
    bool busy = RunPosted();
    if (!timers_.empty()) busy |= RunDueTimers();
    while (ucp_worker_progress(worker_) != 0) busy = true;
    if (!closing_requests_.empty()) {
      ReapClosedEndpoints();
      busy = true;
    }
    if (busy) {
      idle_since.reset();
      continue;
    }
    absl::Time now = absl::Now();
    if (!idle_since) idle_since = now;
    if (now - *idle_since < options_.spin_before_sleep) {
      // Polling, but let the peer (often on the same few cores) run what we wait for.
      sched_yield();
      continue;
    }
    SleepUntilEvent();
    idle_since.reset();
  }
  Teardown();
}

void UcxWorker::Teardown() {
  for (auto& [id, peer] : peers_) CloseEndpoint(*peer, /*flush=*/peer->failure.ok());
  // Completions of the flushed or cancelled requests arrive through progress and the posted
  // queue; run them so every Op is freed, for a bounded time (a flush to a peer that went away
  // meanwhile ends with the endpoint's error, or is abandoned here).
  absl::Time give_up = absl::Now() + absl::Seconds(2);
  bool ran = true;
  while ((ran || !closing_requests_.empty()) && absl::Now() < give_up) {
    ran = false;
    while (ucp_worker_progress(worker_) != 0) ran = true;
    ran |= RunPosted();
    ReapClosedEndpoints();
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    posted_.clear();
  }
  timers_.clear();
  failure_listeners_.clear();
}

}  // namespace gpupool::transport
