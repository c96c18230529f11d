#include "pool/sim/lease_simulation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "pool/scheduler/scheduler.h"

namespace gpupool::pool::sim {
namespace {

constexpr int64_t kDay = 24 * 3600;

enum class EventKind { kArrival, kFinish, kStop, kGiveUp };

struct Event {
  int64_t at;
  uint64_t sequence;  // ties in insertion order: deterministic
  EventKind kind;
  size_t job;
  std::string lease;
  bool operator>(const Event& o) const { return std::tie(at, sequence) > std::tie(o.at, o.sequence); }
};

// The job behind each live lease, and how far it has got.
struct Running {
  size_t job;
  int64_t started_s;
  bool stopping = false;  // revoked; stops at its next safe point
};

SchedulingConfig DedicatedConfig(const SchedulingConfig& config) {
  SchedulingConfig dedicated = config;
  for (Team& team : dedicated.teams) {
    for (TeamQuota& q : team.quotas) {
      q.borrowing_limit_milli = 0;
      q.lending_limit_milli = 0;
    }
  }
  return dedicated;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p * static_cast<double>(values.size())))];
}

}  // namespace

LeaseSimulationResult SimulateLeases(const Inventory& inventory, const SchedulingConfig& base,
                                     const std::vector<SimJob>& jobs,
                                     const LeaseSimulationOptions& options) {
  const SchedulingConfig config = options.pooled ? base : DedicatedConfig(base);
  Scheduler scheduler(inventory, config);
  LeaseSimulationResult result;
  result.mode = options.pooled ? "pooled" : "dedicated";
  result.capacity_gpus = inventory.gpu_count();
  int64_t horizon = options.horizon_s;
  if (horizon == 0) {
    for (const SimJob& j : jobs) horizon = std::max(horizon, j.arrival_s);
    horizon += kDay;
  }
  result.horizon_hours = static_cast<double>(horizon) / 3600.0;
  int64_t longest_grace = 0;
  for (const PriorityClass& c : config.priority_classes) {
    if (c.preemptible) longest_grace = std::max(longest_grace, c.grace_period_s);
  }

  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  uint64_t sequence = 0;
  auto push = [&](int64_t at, EventKind kind, size_t job, std::string lease = "") {
    events.push({at, sequence++, kind, job, std::move(lease)});
  };
  for (size_t i = 0; i < jobs.size(); ++i) push(jobs[i].arrival_s, EventKind::kArrival, i);

  std::vector<int64_t> remaining(jobs.size());
  std::vector<int> attempt(jobs.size(), 0);
  std::vector<char> started(jobs.size(), 0);
  std::vector<std::string> pending_request(jobs.size());  // the job's request while queued
  std::map<std::string, size_t> job_of_request;
  std::map<std::string, Running> running;       // by lease id
  std::map<std::string, TeamFigures> teams;
  for (const Team& t : config.teams) teams[t.name].team = t.name;
  std::vector<double> guaranteed_delays;
  double held_milli_seconds = 0, sprint_gpu_seconds = 0;
  std::set<std::pair<std::string, int64_t>> sprint_weeks;
  int64_t now = 0, last_progress = 0;

  auto slot_milli = [](const SimJob& j) {
    return static_cast<double>(SlotComputeMilli(j.request.slot)) * j.request.slot_count;
  };
  auto submit = [&](size_t i) {
    const SimJob& job = jobs[i];
    LeaseRequest r = job.request;
    r.id = absl::StrCat(job.request.id, "/", attempt[i]++);
    r.runtime_estimate_s = remaining[i];
    if (!scheduler.Submit(r, now).ok()) return;  // never fits: the generator made it too big
    job_of_request[r.id] = i;
    pending_request[i] = r.id;
  };
  auto account_until = [&](int64_t t) {
    double held = 0;
    for (const auto& [id, lease] : scheduler.leases()) {
      held += static_cast<double>(lease.milli);
      const SimJob& job = jobs[running.at(id).job];
      teams[job.request.team].received_gpu_hours += static_cast<double>(lease.milli) / 1000.0 *
                                                    static_cast<double>(t - now) / 3600.0;
      if (job.sprint) sprint_gpu_seconds += static_cast<double>(lease.milli) / 1000.0 * static_cast<double>(t - now);
    }
    held_milli_seconds += held * static_cast<double>(t - now);
  };

  while (!events.empty() && events.top().at <= horizon) {
    int64_t t = events.top().at;
    account_until(t);
    now = t;
    if (options.progress && now - last_progress >= kDay) {
      options.progress(now, horizon);
      last_progress = now;
    }
    while (!events.empty() && events.top().at == t) {
      Event e = events.top();
      events.pop();
      switch (e.kind) {
        case EventKind::kArrival: {
          const SimJob& job = jobs[e.job];
          remaining[e.job] = job.work_s;
          teams[job.request.team].demanded_gpu_hours +=
              slot_milli(job) / 1000.0 * static_cast<double>(job.work_s) / 3600.0;
          if (job.sprint) sprint_weeks.insert({job.request.team, job.arrival_s / (7 * kDay)});
          submit(e.job);
          if (job.patience_s > 0) push(now + job.patience_s, EventKind::kGiveUp, e.job);
          break;
        }
        case EventKind::kGiveUp: {
          // Only a job that never started gives up; a preempted one is requeued and kept.
          if (started[e.job] || pending_request[e.job].empty()) break;
          if (scheduler.Cancel(pending_request[e.job]).ok()) {
            pending_request[e.job].clear();
            ++result.jobs_abandoned;
          }
          break;
        }
        case EventKind::kFinish: {
          auto it = running.find(e.lease);
          if (it == running.end() || it->second.stopping) break;  // stopped earlier
          (void)scheduler.Release(e.lease, now);
          remaining[it->second.job] = 0;
          ++result.jobs_completed;
          running.erase(it);
          break;
        }
        case EventKind::kStop: {
          auto it = running.find(e.lease);
          if (it == running.end()) break;
          size_t i = it->second.job;
          const SimJob& job = jobs[i];
          int64_t progress = now - it->second.started_s;
          TeamFigures& team = teams[job.request.team];
          ++team.preemptions;
          ++result.preemptions;
          if (job.checkpointable) {
            remaining[i] = std::max<int64_t>(1, remaining[i] - progress) + options.restart_overhead_s;
          } else {
            team.lost_gpu_hours += slot_milli(job) / 1000.0 * static_cast<double>(progress) / 3600.0;
          }
          (void)scheduler.Release(e.lease, now);
          running.erase(it);
          submit(i);
          break;
        }
      }
    }
    CycleResult cycle = scheduler.Schedule(now);
    for (const std::string& lease_id : cycle.granted) {
      const Lease& lease = scheduler.leases().at(lease_id);
      size_t i = job_of_request.at(lease.request.id);
      running[lease_id] = {i, now, false};
      started[i] = 1;
      pending_request[i].clear();
      push(now + remaining[i], EventKind::kFinish, i, lease_id);
      if (lease.guaranteed_wait_s.has_value()) {
        guaranteed_delays.push_back(static_cast<double>(*lease.guaranteed_wait_s));
      }
    }
    for (const Revocation& v : cycle.revoked) {
      Running& r = running.at(v.lease_id);
      r.stopping = true;
      push(std::min(v.deadline_s, now + options.safe_point_s), EventKind::kStop, r.job, v.lease_id);
    }
    for (const std::string& lease_id : cycle.expired) {
      // Released by the scheduler itself (deadline passed, or GPU lost): handled as a stop.
      auto it = running.find(lease_id);
      if (it == running.end()) continue;
      size_t i = it->second.job;
      running.erase(it);
      submit(i);
    }
  }
  account_until(horizon);
  result.jobs_unfinished = static_cast<int>(running.size() + scheduler.Pending().size());

  result.mean_utilisation = held_milli_seconds / 1000.0 / (result.capacity_gpus * static_cast<double>(horizon));
  result.guaranteed_requests = static_cast<int>(guaranteed_delays.size());
  if (!guaranteed_delays.empty()) {
    double sum = 0;
    int within = 0;
    for (double d : guaranteed_delays) {
      sum += d;
      within += d <= static_cast<double>(longest_grace);
    }
    result.guaranteed_delay_mean_s = sum / static_cast<double>(guaranteed_delays.size());
    result.guaranteed_delay_p95_s = Percentile(guaranteed_delays, 0.95);
    result.guaranteed_delay_max_s = *std::max_element(guaranteed_delays.begin(), guaranteed_delays.end());
    result.guaranteed_within_grace = static_cast<double>(within) / static_cast<double>(guaranteed_delays.size());
  }
  if (!sprint_weeks.empty()) {
    result.burst_gpu_hours_per_sprint_week = sprint_gpu_seconds / 3600.0 / static_cast<double>(sprint_weeks.size());
  }
  double sum = 0, sum_sq = 0;
  for (auto& [name, t] : teams) {
    double x = t.demanded_gpu_hours > 0 ? std::min(1.0, t.received_gpu_hours / t.demanded_gpu_hours) : 1.0;
    sum += x;
    sum_sq += x * x;
    result.lost_gpu_hours += t.lost_gpu_hours;
    result.teams.push_back(t);
  }
  if (!teams.empty() && sum_sq > 0) result.jain_fairness = sum * sum / (static_cast<double>(teams.size()) * sum_sq);
  return result;
}

}  // namespace gpupool::pool::sim
