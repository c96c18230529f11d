#include "runtime/service/head_durability.h"

#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "runtime/service/diagnostic_holds.h"
#include "runtime/service/pool_ids.h"
#include "runtime/rpc/lease_codec.h"

namespace gpupool::runtime {

kj::Promise<void> HeadDurability::GiveBackExpired(kj::Timer& timer) {
  return timer.afterDelay(250 * kj::MILLISECONDS).then([this, &timer] {
    ReclaimBook::Dropped expired = kept_.TakeExpired(ReclaimBook::Clock::now());
    if (!expired.empty()) {
      std::fprintf(stderr,
                   "gpupool head: %zu lease(s) and %zu queued request(s) their jobs did not reclaim in time go "
                   "back to the pool\n",
                   expired.leases.size(), expired.requests.size());
      GiveBack(expired, "not reclaimed by its job");
    }
    return GiveBackExpired(timer);
  });
}

void HeadDurability::GiveBack(const ReclaimBook::Dropped& dropped, const std::string& why) {
  for (const std::string& id : dropped.leases) {
    (void)deps_.pool.Release(id);
    JournalClose(id, why);
  }
  for (const std::string& id : dropped.requests) {
    (void)deps_.pool.Withdraw(id);
    if (journal_ != nullptr) journal_->RemoveRequest(id);
  }
  if (!dropped.empty()) deps_.pump.ScheduleSoon();
}

void HeadDurability::RequeueJournaledRequests(const std::vector<RequestRecord>& requests,
                                              ReclaimBook::Clock::time_point until) {
  // In the journal's order, which was the queue's: equals stay in the order they came.
  const double now = WallSeconds();
  size_t dropped = 0;
  for (const RequestRecord& r : requests) {
    absl::Status st;
    std::optional<absl::string_view> client_id = ClientIdOf(r.request_id);
    if (r.job_id.empty()) {
      st = absl::FailedPreconditionError("its job has no key to reclaim it with");
    } else if (!client_id.has_value()) {
      st = absl::InvalidArgumentError("its id has no session prefix");
    } else {
      absl::StatusOr<pool::LeaseRequest> request = rpc::LeaseRequestFromBytes(r.request);
      st = request.ok() && request->id != r.request_id
               ? absl::InvalidArgumentError("its bytes name another request")
               : request.status();
      if (st.ok()) st = deps_.pool.Requeue(*std::move(request), now - r.submitted_s, &deps_.pump);
    }
    if (st.ok()) {
      kept_.KeepRequest(r.request_id, ReclaimBook::KeptRequest{.job_key = r.job_id,
                                                               .client_id = std::string(*client_id),
                                                               .team = r.team,
                                                               .until = until});
      deps_.sessions.NumberSessionsPast(r.request_id);
      continue;
    }
    ++dropped;
    std::fprintf(stderr, "gpupool head: queued request %s of the previous run is dropped: %s\n",
                 r.request_id.c_str(), std::string(st.message()).c_str());
    journal_->RemoveRequest(r.request_id);
  }
  if (!requests.empty()) {
    std::fprintf(stderr,
                 "gpupool head: %zu queued request(s) of the previous run keep their place for their jobs, "
                 "%zu dropped\n",
                 requests.size() - dropped, dropped);
  }
}

absl::Status HeadDurability::Open() {
  if (journal_path_.empty()) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<HeadJournal>> journal = HeadJournal::Open(journal_path_);
  if (!journal.ok()) return journal.status();
  journal_ = *std::move(journal);
  absl::StatusOr<HeadState> previous = journal_->Load();
  if (!previous.ok()) return previous.status();
  // The previous run's leases are taken back and kept for their jobs, whose tasks run on through
  // the restart and which reclaim them when they reconnect (Session.reclaim); a lease that no
  // longer fits this pool is closed into the ledger, so no GPU-second goes unaccounted. Its
  // queued requests are queued again at the place they had, kept for their jobs likewise.
  double now = WallSeconds();
  size_t closed = 0;
  const auto until = KeepUntil();
  for (const LeaseRecord& l : previous->leases) {
    if (IsDiagnosticLease(l.account.team, l.request_id)) {
      // Its agent starts a new test if one is still due. Closed as of its grant: the test lasted
      // seconds, and charging the pool for the head's downtime would overstate it.
      journal_->CloseLease(l.lease_id, l.granted_s, "head restarted");
      continue;
    }
    absl::StatusOr<pool::Lease> lease =
        l.lease.empty() ? absl::InvalidArgumentError("its record has no lease (an older journal)")
                        : rpc::LeaseFromBytes(l.lease);
    absl::Status adopted = lease.ok() ? deps_.pool.Adopt(*lease, &deps_.pump) : lease.status();
    if (adopted.ok()) {
      // Also as its request's grant: one granted while its job was away, then this restart,
      // leaves a job that still waits on the request and names it, not the lease.
      kept_.KeepGranted(*lease, l.job_id, l.account.team, until);
      deps_.sessions.NumberSessionsPast(l.lease_id);
      continue;
    }
    std::fprintf(stderr, "gpupool head: lease %s of the previous run is not taken back: %s\n", l.lease_id.c_str(),
                 std::string(adopted.message()).c_str());
    journal_->CloseLease(l.lease_id, now, "head restarted");
    ++closed;
  }
  if (!previous->leases.empty()) {
    std::fprintf(stderr,
                 "gpupool head: journal %s: %zu lease(s) of the previous run kept for %lld s for their jobs to "
                 "reclaim, %zu closed\n",
                 journal_path_.c_str(), kept_.lease_count(),
                 static_cast<long long>(reclaim_window_.count() / 1000), closed);
  }
  RequeueJournaledRequests(previous->requests, until);
  return journal_->Flush();
}

kj::Promise<absl::Status> HeadDurability::Durable(JournalTicket ticket) {
  if (journal_ == nullptr) return absl::OkStatus();
  auto paf = kj::newPromiseAndCrossThreadFulfiller<absl::Status>();
  // OnDurable wants a copyable callback; the fulfiller is move-only.
  auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<absl::Status>>>(kj::mv(paf.fulfiller));
  journal_->OnDurable(ticket, [fulfiller](absl::Status st) { (*fulfiller)->fulfill(kj::mv(st)); });
  return kj::mv(paf.promise);
}

void HeadDurability::JournalLease(const pool::Lease& lease, const std::string& job) {
  if (journal_ == nullptr) return;
  LeaseRecord record;
  record.lease_id = lease.id;
  record.request_id = lease.request.id;
  record.job_id = job;
  record.node = lease.gpus.empty() ? "" : lease.gpus.front().node;
  record.account.team = lease.request.team;
  record.account.project = lease.request.project;
  record.account.workload_class = lease.request.workload_class;
  record.account.priority_class = lease.request.priority_class;
  if (!lease.gpus.empty()) {
    const pool::InventoryGpu* gpu = deps_.pool.inventory().Find(lease.gpus.front());
    if (gpu != nullptr) record.account.gpu_model = gpu->device.model;
  }
  record.account.gpus = static_cast<double>(lease.milli) / 1000.0;
  record.lease = rpc::LeaseToBytes(lease);  // what a restarted head takes back
  record.granted_s = WallSeconds();
  journal_->RecordLease(std::move(record));
}

void HeadDurability::JournalClose(const std::string& lease_id, const std::string& cause) {
  if (journal_ == nullptr) return;
  journal_->CloseLease(lease_id, WallSeconds(), cause);
}

}  // namespace gpupool::runtime
