#include "runtime/client/remote_session_state.h"

#include "absl/strings/str_cat.h"
#include "runtime/rpc/rpc_connection.h"

namespace gpupool::runtime {

void RemoteSessionState::SetClock(double pool_now_s, double clock_speed) {
  pool_now_at_connect_ = pool_now_s;
  clock_speed_ = clock_speed;
  connected_at_ = std::chrono::steady_clock::now();
}

double RemoteSessionState::Now() const {
  std::chrono::duration<double> real = std::chrono::steady_clock::now() - connected_at_;
  return pool_now_at_connect_ + real.count() * clock_speed_;
}

std::shared_ptr<PoolLink> RemoteSessionState::Stop() {
  stopping_ = true;
  return std::move(link_);
}

void RemoteSessionState::Granted(const pool::Lease& lease, LeaseListener* user) {
  pending_.erase(lease.request.id);
  leases_.Open(lease.id, LeaseBook::Lease{user, lease.request.team, static_cast<double>(lease.milli) / 1000.0,
                                          lease.borrowing, Now()});
}

RemoteSessionState::Holders RemoteSessionState::HeldLeases(const std::set<std::string>* only,
                                                           const std::set<std::string>& except) const {
  Holders held;
  for (const auto& [id, lease] : leases_.open()) {
    if ((only == nullptr || only->count(id) != 0) && except.count(id) == 0) held.emplace_back(id, lease.listener);
  }
  return held;
}

absl::Status RemoteSessionState::AddPending(const pool::LeaseRequest& r, LeaseListener* listener,
                                            std::shared_ptr<PoolLink>* link) {
  if (gave_up_ || link_ == nullptr) return absl::UnavailableError(RpcConnection::kConnectionLost);
  if (pending_.count(r.id)) return absl::AlreadyExistsError(absl::StrCat("request '", r.id, "' is already pending"));
  // Recorded first: its grant may arrive before the call returns.
  pending_[r.id] = Pending{r, listener};
  // While the connection is being made again, the request waits for it.
  *link = link_lost_ ? nullptr : link_;
  return absl::OkStatus();
}

bool RemoteSessionState::Refused(const pool::LeaseRequest& r, const absl::Status& st) {
  // A connection lost under the call: the request is sent again once reconnected.
  if (link_lost_ && absl::IsUnavailable(st)) return false;
  return pending_.erase(r.id) > 0;
}

absl::Status RemoteSessionState::Withdraw(const std::string& request_id, std::shared_ptr<PoolLink>* link) {
  bool was_pending = pending_.erase(request_id) > 0;
  if (link_lost_) {
    // Reconnecting: forgotten here; if the head kept it queued, the reconnection withdraws it.
    return was_pending ? absl::OkStatus()
                       : absl::NotFoundError(absl::StrCat("request '", request_id, "' is not pending"));
  }
  if (gave_up_ || link_ == nullptr) return absl::UnavailableError(RpcConnection::kConnectionLost);
  *link = link_;
  return absl::OkStatus();
}

bool RemoteSessionState::ReleaseWhileAway(const std::string& lease_id) {
  if (!link_lost_) return false;
  leases_.Close(lease_id, Now());
  released_while_away_.push_back(lease_id);
  return true;
}

void RemoteSessionState::ReleaseLater(const std::vector<std::string>& lease_ids) {
  released_while_away_.insert(released_while_away_.end(), lease_ids.begin(), lease_ids.end());
}

void RemoteSessionState::LinkLost(Loss loss) {
  link_lost_ = true;  // from here a Release waits for the new session (released_while_away_)
  loss_ = std::move(loss);
}

RemoteSessionState::Resumption RemoteSessionState::Reconnected(std::shared_ptr<PoolLink> fresh) {
  Resumption r;
  r.old = std::move(link_);
  // The leases held through the loss, taken before any grant can arrive on the fresh session.
  for (const auto& [id, lease] : leases_.open()) r.held.emplace_back(id, lease.listener);
  r.given_back.swap(released_while_away_);
  link_ = std::move(fresh);
  link_lost_ = false;
  ++reconnections_;
  for (const auto& [id, p] : pending_) r.resend.push_back(p);
  return r;
}

std::shared_ptr<PoolLink> RemoteSessionState::Abandon() {
  link_lost_ = false;
  return std::move(link_);
}

RemoteSessionState::Holders RemoteSessionState::GiveUp() {
  gave_up_ = true;
  Holders failed;
  for (const auto& [id, p] : pending_) failed.emplace_back(id, p.listener);
  pending_.clear();
  return failed;
}

}  // namespace gpupool::runtime
