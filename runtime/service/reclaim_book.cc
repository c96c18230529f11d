#include "runtime/service/reclaim_book.h"

#include "runtime/service/pool_ids.h"

namespace gpupool::runtime {

void ReclaimBook::KeepLease(const std::string& lease_id, const std::string& job_key, Clock::time_point until) {
  leases_[lease_id] = KeptLease{job_key, until, ""};
}

void ReclaimBook::KeepGranted(const pool::Lease& lease, const std::string& job_key, const std::string& team,
                              Clock::time_point until) {
  const std::string& pool_id = lease.request.id;
  std::optional<absl::string_view> client_id = ClientIdOf(pool_id);
  if (!client_id.has_value() || by_job_.count({job_key, std::string(*client_id)}) != 0) {
    KeepLease(lease.id, job_key, until);  // no request name to go by
    return;
  }
  KeepRequest(pool_id, KeptRequest{.job_key = job_key, .client_id = std::string(*client_id), .team = team,
                                   .until = until, .granted = lease});
  leases_[lease.id] = KeptLease{job_key, until, pool_id};
}

void ReclaimBook::KeepRequest(const std::string& pool_id, KeptRequest request) {
  by_job_[{request.job_key, request.client_id}] = pool_id;
  requests_[pool_id] = std::move(request);
}

bool ReclaimBook::Granted(const pool::Lease& lease) {
  auto it = requests_.find(lease.request.id);
  if (it == requests_.end() || it->second.granted.has_value()) return false;
  it->second.granted = lease;
  leases_[lease.id] = KeptLease{it->second.job_key, it->second.until, it->first};
  return true;
}

bool ReclaimBook::Lost(const std::string& lease_id) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return false;
  if (!it->second.request.empty()) {
    if (auto r = requests_.find(it->second.request); r != requests_.end()) EraseRequest(r);
  }
  leases_.erase(it);
  return true;
}

bool ReclaimBook::TakeLease(const std::string& lease_id, const std::string& job_key) {
  auto it = leases_.find(lease_id);
  // An empty key never matches: a job without one cannot take anything back.
  if (it == leases_.end() || job_key.empty() || it->second.job_key != job_key) return false;
  if (!it->second.request.empty()) {
    if (auto r = requests_.find(it->second.request); r != requests_.end()) EraseRequest(r);
  }
  leases_.erase(it);
  return true;
}

std::optional<std::pair<std::string, ReclaimBook::KeptRequest>> ReclaimBook::TakeRequest(
    const std::string& job_key, const std::string& client_id) {
  if (job_key.empty()) return std::nullopt;
  auto index = by_job_.find({job_key, client_id});
  if (index == by_job_.end()) return std::nullopt;
  auto it = requests_.find(index->second);
  if (it == requests_.end()) {
    by_job_.erase(index);
    return std::nullopt;
  }
  std::pair<std::string, KeptRequest> taken{it->first, std::move(it->second)};
  if (taken.second.granted.has_value()) leases_.erase(taken.second.granted->id);
  EraseRequest(it);
  return taken;
}

void ReclaimBook::EraseRequest(std::map<std::string, KeptRequest>::iterator it) {
  // The index may name a newer request of the same job and id by now: only this one's goes.
  if (auto index = by_job_.find({it->second.job_key, it->second.client_id});
      index != by_job_.end() && index->second == it->first) {
    by_job_.erase(index);
  }
  requests_.erase(it);
}

template <typename Pred>
void ReclaimBook::TakeIf(Pred drop, Dropped& out) {
  // A granted request goes with its lease (same key, same time): the lease is released below.
  for (auto it = requests_.begin(); it != requests_.end();) {
    auto next = std::next(it);
    if (drop(it->second.job_key, it->second.until)) {
      if (!it->second.granted.has_value()) out.requests.push_back(it->first);
      EraseRequest(it);
    }
    it = next;
  }
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (drop(it->second.job_key, it->second.until)) {
      out.leases.push_back(it->first);
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
}

ReclaimBook::Dropped ReclaimBook::TakeRest(const std::string& job_key) {
  Dropped out;
  if (job_key.empty()) return out;
  TakeIf([&](const std::string& key, Clock::time_point) { return key == job_key; }, out);
  return out;
}

ReclaimBook::Dropped ReclaimBook::TakeExpired(Clock::time_point now) {
  Dropped out;
  TakeIf([&](const std::string&, Clock::time_point until) { return until <= now; }, out);
  return out;
}

const ReclaimBook::KeptRequest* ReclaimBook::FindRequest(const std::string& pool_id) const {
  auto it = requests_.find(pool_id);
  return it == requests_.end() ? nullptr : &it->second;
}

}  // namespace gpupool::runtime
