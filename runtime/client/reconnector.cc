#include "runtime/client/reconnector.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/client/pool_link.h"
#include "runtime/rpc/rpc_connection.h"

namespace gpupool::runtime {

Reconnector::Reconnector(Deps deps) : deps_(std::move(deps)) {}

Reconnector::~Reconnector() { Stop(); }

void Reconnector::Start() {
  if (reconnects()) thread_ = std::thread([this] { Run(); });
}

void Reconnector::Stop() {
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void Reconnector::LinkLost(const absl::Status& why) {
  // A head with a journal keeps this job's leases through its restart and hands them back when
  // the job reconnects (Reclaim), so while it tries to, its tasks run on. Otherwise the head
  // takes a vanished job's leases back, so whatever this job held is lost now.
  // Kept no longer than the head keeps them: past its window they may be someone else's.
  bool keep;
  {
    MutexLock lock(deps_.mu);
    const std::shared_ptr<PoolLink>& link = deps_.state->link();
    keep = reconnects() && link != nullptr && link->reclaim_window().count() > 0;
    if (reconnects()) {
      deps_.state->LinkLost({.why = why,
                             .keep_leases_until = std::chrono::steady_clock::now() +
                                                  (keep ? link->reclaim_window() : std::chrono::milliseconds(0))});
    }
  }
  if (!keep) LoseHeldLeases(RpcConnection::kConnectionLost);
  if (!reconnects()) {
    GiveUp(why);
    return;
  }
  cv_.NotifyAll();
}

void Reconnector::LoseHeldLeases(const std::string& why, const std::set<std::string>* only,
                                 const std::set<std::string>& except) {
  RemoteSessionState::Holders lost;
  {
    MutexLock lock(deps_.mu);
    lost = deps_.state->HeldLeases(only, except);
  }
  for (auto& [id, user] : lost) {
    {
      MutexLock lock(deps_.mu);
      deps_.state->Close(id);
    }
    deps_.callbacks->Post([user = user, id = id, why] { user->OnLost(id, why); });
  }
}

void Reconnector::GiveUp(const absl::Status& why) {
  LoseHeldLeases(RpcConnection::kConnectionLost);  // kept while reconnecting; gone for good now
  RemoteSessionState::Holders failed;
  {
    MutexLock lock(deps_.mu);
    failed = deps_.state->GiveUp();
  }
  absl::Status status = absl::UnavailableError(absl::StrCat("the pool service is unreachable: ", why.message()));
  for (auto& [id, user] : failed) {
    deps_.callbacks->Post([user = user, id = id, status] { user->OnRequestFailed(id, status); });
  }
  deps_.callbacks->Post([cb = deps_.on_disconnected, why] {
    if (cb) cb(why);
  });
}

void Reconnector::Run() {
  MutexLock lock(deps_.mu);
  while (true) {
    cv_.Wait(deps_.mu, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(deps_.mu) {
      return deps_.state->stopping() || deps_.state->link_lost();
    });
    if (deps_.state->stopping()) return;
    absl::Status why;
    std::shared_ptr<PoolLink> fresh = Redial(&why);
    if (deps_.state->stopping()) return;
    if (fresh == nullptr) {
      std::shared_ptr<PoolLink> old = deps_.state->Abandon();
      lock.Unlock();
      old.reset();
      GiveUp(why);
      return;
    }
    RemoteSessionState::Resumption taken = deps_.state->Reconnected(fresh);
    lock.Unlock();
    taken.old.reset();  // closes the dead connection's loop
    Resume(*fresh, taken);
    lock.Lock();
  }
}

std::shared_ptr<PoolLink> Reconnector::Redial(absl::Status* why) {
  const auto deadline = std::chrono::steady_clock::now() + deps_.reconnect_for;
  auto backoff = std::chrono::milliseconds(50);
  *why = deps_.state->loss().why;
  bool leases_dropped = false;
  while (!deps_.state->stopping() && std::chrono::steady_clock::now() < deadline) {
    if (!leases_dropped && std::chrono::steady_clock::now() >= deps_.state->loss().keep_leases_until) {
      // The head no longer keeps them: their GPUs may be someone else's by now.
      leases_dropped = true;
      deps_.mu->Unlock();
      LoseHeldLeases(RpcConnection::kConnectionLost);
      deps_.mu->Lock();
      continue;
    }
    deps_.mu->Unlock();
    absl::StatusOr<std::shared_ptr<PoolLink>> link = deps_.dial();
    deps_.mu->Lock();
    if (link.ok()) return *std::move(link);
    *why = link.status();
    cv_.WaitFor(deps_.mu, backoff, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(deps_.mu) { return deps_.state->stopping(); });
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  return nullptr;
}

void Reconnector::Resume(PoolLink& fresh, RemoteSessionState::Resumption& taken) {
  // Those the head kept are this session's now; the others are lost (a head without a journal
  // kept none: they were reported at the loss).
  Reclaimed reclaimed = Reclaim(fresh, taken.held, std::move(taken.given_back), taken.resend);
  LoseHeldLeases("the pool service did not keep it while the job was away", &reclaimed.held, reclaimed.kept);
  // Withdrawn by the job while the reclaim was under way (its withdrawal may have reached the
  // head before the request was this session's): withdrawn again now. (One granted meanwhile is
  // no longer pending at the head either, which answers NotFound.)
  std::vector<std::string> withdrawn_meanwhile;
  {
    MutexLock lock(deps_.mu);
    for (const std::string& id : reclaimed.queued) {
      if (!deps_.state->IsPending(id)) withdrawn_meanwhile.push_back(id);
    }
  }
  for (const std::string& id : withdrawn_meanwhile) fresh.PostWithdraw(id);
  Resend(fresh, taken.resend, reclaimed.queued);
}

Reconnector::Reclaimed Reconnector::Reclaim(PoolLink& link, const RemoteSessionState::Holders& held,
                                            std::vector<std::string> given_back,
                                            const std::vector<RemoteSessionState::Pending>& waiting) {
  Reclaimed result;
  for (const auto& [id, user] : held) result.held.insert(id);
  // A head that keeps what a lost job held is told even when the job holds nothing now: what it
  // kept and the job does not name (withdrawn while away) then goes back at once.
  if (held.empty() && given_back.empty() && waiting.empty() && link.reclaim_window().count() == 0) return result;
  RemoteSessionState::Holders requests;
  for (const RemoteSessionState::Pending& p : waiting) requests.emplace_back(p.request.id, p.listener);
  absl::StatusOr<PoolLink::Reclaimed> answer = link.Reclaim(held, given_back, requests);
  if (!answer.ok()) {
    // Nothing is known to be kept: the held leases are lost (the caller says so) and the
    // requests are sent again; those given back meanwhile wait for the next connection.
    MutexLock lock(deps_.mu);
    deps_.state->ReleaseLater(given_back);
    return result;
  }
  result.kept = std::move(answer->kept);
  result.queued = std::move(answer->queued);
  // Given back before the reclaim (while away, or while it was under way: such a release reached
  // the head before the lease was this session's): give it back now.
  std::vector<std::string> to_release = given_back;
  {
    MutexLock lock(deps_.mu);
    for (const auto& [id, user] : held) {
      if (!deps_.state->Holds(id)) to_release.push_back(id);
    }
  }
  for (const std::string& id : to_release) {
    if (result.kept.erase(id) == 0) continue;
    link.PostRelease(id);
  }
  return result;
}

void Reconnector::Resend(PoolLink& fresh, const std::vector<RemoteSessionState::Pending>& resend,
                         const std::set<std::string>& queued) {
  // Queued work the head did not keep (with its place in the queue) is asked for again, unless
  // the job withdrew it meanwhile.
  for (const RemoteSessionState::Pending& p : resend) {
    if (queued.count(p.request.id) != 0) continue;
    {
      MutexLock lock(deps_.mu);
      if (!deps_.state->IsPending(p.request.id)) continue;
    }
    absl::Status st = fresh.Request(p.request, p.listener);
    if (st.ok() || absl::IsAlreadyExists(st)) continue;
    bool still_pending;
    {
      MutexLock lock(deps_.mu);
      still_pending = deps_.state->ForgetPending(p.request.id);
    }
    if (still_pending) {
      deps_.callbacks->Post([user = p.listener, id = p.request.id, st] { user->OnRequestFailed(id, st); });
    }
  }
}

}  // namespace gpupool::runtime
