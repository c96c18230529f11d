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

// kWake: nothing happens but a cycle, at a time the scheduler asked for (NextTimedChange).
enum class EventKind { kArrival, kFinish, kStop, kGiveUp, kWake };

struct Event {
  int64_t at;
  uint64_t sequence;  // ties in insertion order: deterministic
  EventKind kind;
  size_t job;
  std::string lease;
  bool operator>(const Event& o) const { return std::tie(at, sequence) > std::tie(o.at, o.sequence); }
};

// The job behind each live lease, and when it started.
struct Running {
  size_t job;
  int64_t started_s;
  bool stopping = false;  // revoked; stops at its next safe point
  int64_t checkpoints = 0;  // periodic checkpoints reported to the scheduler
};

// How much lease time a job still needs: work not yet done plus, after a preemption, the time it
// spends loading its checkpoint before that work resumes.
struct Progress {
  int64_t work_left_s = 0;
  int64_t overhead_left_s = 0;
  int64_t lease_time_s() const { return work_left_s + overhead_left_s; }
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

const PriorityClass* ClassOf(const SchedulingConfig& config, const LeaseRequest& r) {
  return config.FindClass(r.priority_class.empty() ? "training" : r.priority_class);
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
  Scheduler scheduler(inventory, config, options.scheduler);
  LeaseSimulationResult result;
  result.mode = options.pooled ? "pooled" : "dedicated";
  result.capacity_gpus = inventory.gpu_count();
  int64_t horizon = options.horizon_s;
  if (horizon == 0) {
    for (const SimJob& j : jobs) horizon = std::max(horizon, j.arrival_s);
    horizon += kDay;
  }
  result.horizon_hours = static_cast<double>(horizon) / 3600.0;

  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  uint64_t sequence = 0;
  auto push = [&](int64_t at, EventKind kind, size_t job, std::string lease = "") {
    events.push({at, sequence++, kind, job, std::move(lease)});
  };
  for (size_t i = 0; i < jobs.size(); ++i) push(jobs[i].arrival_s, EventKind::kArrival, i);

  std::vector<Progress> progress(jobs.size());
  std::vector<int> attempt(jobs.size(), 0);
  std::vector<char> started(jobs.size(), 0);
  std::vector<std::string> pending_request(jobs.size());  // the job's request while queued
  int waiting = 0;                                         // jobs with a pending request
  std::map<std::string, size_t> job_of_request;
  std::set<std::pair<size_t, size_t>> preempted_by;  // (victim job, preempting job)
  std::map<std::string, Running> running;       // by lease id
  std::map<std::string, TeamFigures> teams;
  for (const Team& t : config.teams) teams[t.name].team = t.name;
  std::vector<double> guaranteed_delays;
  int guaranteed_within_grace = 0;
  double idle_waiting_gpu_s = 0, idle_fit_gpu_s = 0, sprint_gpu_s = 0, restart_gpu_s = 0;
  std::vector<double> held_by_day_gpu_s;  // GPU-seconds held by leases, per day of the horizon
  std::set<std::pair<std::string, int64_t>> sprint_weeks;
  int64_t now = 0, last_progress = 0;
  int64_t next_wake = 0;  // the earliest kWake queued and still ahead, or in the past

  auto gpus_of = [](const SimJob& j) {
    return static_cast<double>(SlotComputeMilli(j.request.slot)) / 1000.0 * j.request.slot_count;
  };
  auto submit = [&](size_t i) {
    const SimJob& job = jobs[i];
    LeaseRequest r = job.request;
    r.id = absl::StrCat(job.request.id, "/", attempt[i]++);
    r.runtime_estimate_s = progress[i].lease_time_s();
    if (!scheduler.Submit(r, now).ok()) return;  // never fits: the generator made it too big
    job_of_request[r.id] = i;
    pending_request[i] = r.id;
    ++waiting;
  };
  auto account_until = [&](int64_t t) {
    const double dt = static_cast<double>(t - now);
    double held = 0;
    for (const auto& [id, lease] : scheduler.leases()) {
      const double gpus = static_cast<double>(lease.milli) / 1000.0;
      held += gpus;
      const SimJob& job = jobs[running.at(id).job];
      teams[job.request.team].received_gpu_hours += gpus * dt / 3600.0;
      if (job.sprint) sprint_gpu_s += gpus * dt;
    }
    if (waiting > 0) {
      const double idle = result.capacity_gpus - held;
      idle_waiting_gpu_s += idle * dt;
      // Of that, what waiting work could have used by placement alone (the rest was capacity no
      // waiting request fit: a fragment too small, the wrong model).
      if (idle >= 0.001 && dt > 0) {
        const int64_t idle_milli = static_cast<int64_t>(idle * 1000.0 + 0.5);
        const int64_t fits = scheduler.WaitingMilliThatFitsNow(idle_milli);
        idle_fit_gpu_s += static_cast<double>(std::min(fits, idle_milli)) / 1000.0 * dt;
      }
    }
    for (int64_t from = now; from < t;) {
      const int64_t day = from / kDay, to = std::min(t, (day + 1) * kDay);
      if (static_cast<size_t>(day) >= held_by_day_gpu_s.size()) held_by_day_gpu_s.resize(day + 1, 0.0);
      held_by_day_gpu_s[day] += held * static_cast<double>(to - from);
      from = to;
    }
  };
  // A lease of job `i` ends after running `ran_s`. The time it spent loading a checkpoint is
  // restart overhead; `kept_s` of the work it did survives (all of it on completion or with a
  // snapshot at the safe point), the rest is lost and must be done again.
  auto end_attempt = [&](size_t i, int64_t ran_s, int64_t kept_s) {
    Progress& p = progress[i];
    const int64_t overhead = std::min(ran_s, p.overhead_left_s);
    const int64_t work = ran_s - overhead;
    kept_s = std::min(kept_s, work);
    p.overhead_left_s -= overhead;
    p.work_left_s = std::max<int64_t>(0, p.work_left_s - kept_s);
    const SimJob& job = jobs[i];
    restart_gpu_s += gpus_of(job) * static_cast<double>(overhead);
    teams[job.request.team].lost_gpu_hours += gpus_of(job) * static_cast<double>(work - kept_s) / 3600.0;
  };
  // The preempted job goes back to the queue; a checkpointable one loads its snapshot first.
  auto requeue = [&](size_t i) {
    if (jobs[i].checkpointable) progress[i].overhead_left_s += options.restart_overhead_s;
    TeamFigures& team = teams[jobs[i].request.team];
    ++team.preemptions;
    ++result.preemptions;
    submit(i);
  };
  // Every job's forced checkpoint interval; 0 for jobs that cannot checkpoint.
  std::vector<int64_t> checkpoint_interval(jobs.size(), 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const PriorityClass* pc = ClassOf(config, jobs[i].request);
    if (jobs[i].checkpointable && pc != nullptr) checkpoint_interval[i] = pc->checkpoint_interval_s;
  }
  // Work a job keeps when stopped without a snapshot: up to its last periodic checkpoint.
  auto checkpointed_work = [&](size_t i, int64_t ran_s) -> int64_t {
    if (checkpoint_interval[i] <= 0) return 0;
    const int64_t checkpointed = ran_s / checkpoint_interval[i] * checkpoint_interval[i];
    return std::max<int64_t>(0, checkpointed - std::min(ran_s, progress[i].overhead_left_s));
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
          progress[e.job].work_left_s = job.work_s;
          teams[job.request.team].demanded_gpu_hours +=
              gpus_of(job) * static_cast<double>(job.work_s) / 3600.0;
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
            --waiting;
            ++result.jobs_abandoned;
          }
          break;
        }
        case EventKind::kFinish: {
          // A revoked job that finishes before its safe point is done: its stop finds no lease.
          auto it = running.find(e.lease);
          if (it == running.end()) break;  // stopped earlier
          (void)scheduler.Release(e.lease, now);
          end_attempt(it->second.job, now - it->second.started_s, now - it->second.started_s);
          ++result.jobs_completed;
          running.erase(it);
          break;
        }
        case EventKind::kStop: {
          // At its safe point: a checkpointable job snapshots and keeps all its progress.
          auto it = running.find(e.lease);
          if (it == running.end()) break;
          size_t i = it->second.job;
          int64_t ran = now - it->second.started_s;
          end_attempt(i, ran, jobs[i].checkpointable ? ran : 0);
          (void)scheduler.Release(e.lease, now);
          running.erase(it);
          requeue(i);
          break;
        }
        case EventKind::kWake:
          break;
      }
    }
    // The runtime reports each forced periodic checkpoint; here, the latest before this cycle.
    for (auto& [lease_id, r] : running) {
      const int64_t interval = checkpoint_interval[r.job];
      if (r.stopping || interval <= 0) continue;
      const int64_t intervals = (now - r.started_s) / interval;
      if (intervals > r.checkpoints) {
        r.checkpoints = intervals;
        (void)scheduler.RecordCheckpoint(lease_id, r.started_s + intervals * interval);
      }
    }
    CycleResult cycle = scheduler.Schedule(now);
    for (const std::string& lease_id : cycle.granted) {
      const Lease& lease = scheduler.leases().at(lease_id);
      size_t i = job_of_request.at(lease.request.id);
      running[lease_id] = {i, now, false};
      if (!started[i]) {
        result.admission_wait_s[lease.request.priority_class].push_back(static_cast<double>(now - jobs[i].arrival_s));
      }
      started[i] = 1;
      pending_request[i].clear();
      --waiting;
      push(now + progress[i].lease_time_s(), EventKind::kFinish, i, lease_id);
      if (lease.guaranteed_wait_s.has_value()) {
        guaranteed_delays.push_back(static_cast<double>(*lease.guaranteed_wait_s));
        const PriorityClass* pc = ClassOf(config, lease.request);
        guaranteed_within_grace += pc != nullptr && *lease.guaranteed_wait_s <= pc->grace_period_s;
      }
    }
    for (const Revocation& v : cycle.revoked) {
      if (v.cause == RevokeCause::kMove) ++result.moves;
      Running& r = running.at(v.lease_id);
      // A loop: job A's request preempts job B after B's request had preempted A (each keeps
      // taking the other's GPUs back). Moves and the reserve's refill name no job.
      if (auto by = job_of_request.find(v.for_request); by != job_of_request.end() && by->second != r.job) {
        if (preempted_by.contains({by->second, r.job})) ++result.preemption_loops;
        preempted_by.insert({r.job, by->second});
      }
      r.stopping = true;
      push(std::min(v.deadline_s, now + options.safe_point_s), EventKind::kStop, r.job, v.lease_id);
    }
    for (const std::string& lease_id : cycle.expired) {
      // Released by the scheduler itself (deadline passed, or GPU lost): no snapshot at a safe
      // point, so the job resumes from its last periodic checkpoint.
      auto it = running.find(lease_id);
      if (it == running.end()) continue;
      size_t i = it->second.job;
      int64_t ran = now - it->second.started_s;
      end_attempt(i, ran, checkpointed_work(i, ran));
      running.erase(it);
      requeue(i);
    }
    // The head cycles on a timer too; here, a cycle when the scheduler says time alone could
    // change a decision (a lease becoming movable for a waiting guaranteed request).
    if (std::optional<int64_t> wake = scheduler.NextTimedChange(now);
        wake && waiting > 0 && (next_wake <= now || *wake < next_wake)) {
      next_wake = *wake;
      push(*wake, EventKind::kWake, 0);
    }
  }
  account_until(horizon);
  result.jobs_unfinished = static_cast<int>(running.size() + scheduler.Pending().size());

  const double capacity_gpu_s = result.capacity_gpus * static_cast<double>(horizon);
  double demanded = 0, lost = 0;
  for (const auto& [name, t] : teams) {
    demanded += t.demanded_gpu_hours;
    lost += t.lost_gpu_hours;
  }
  result.offered_load = demanded * 3600.0 / capacity_gpu_s;
  double held_gpu_s = 0;
  for (double day : held_by_day_gpu_s) held_gpu_s += day;
  result.held_utilisation = held_gpu_s / capacity_gpu_s;
  for (size_t day = 0; day < held_by_day_gpu_s.size(); ++day) {
    const int64_t length = std::min<int64_t>(kDay, horizon - static_cast<int64_t>(day) * kDay);
    result.held_by_day.push_back(length > 0 ? held_by_day_gpu_s[day] /
                                                  (result.capacity_gpus * static_cast<double>(length))
                                            : 0.0);
  }
  result.mean_utilisation = (held_gpu_s - lost * 3600.0 - restart_gpu_s) / capacity_gpu_s;
  result.idle_while_waiting_gpu_hours = idle_waiting_gpu_s / 3600.0;
  result.idle_while_fitting_work_waited_gpu_hours = idle_fit_gpu_s / 3600.0;
  result.lost_gpu_hours = lost;
  result.restart_gpu_hours = restart_gpu_s / 3600.0;
  result.guaranteed_requests = static_cast<int>(guaranteed_delays.size());
  if (!guaranteed_delays.empty()) {
    double sum = 0;
    for (double d : guaranteed_delays) sum += d;
    const double n = static_cast<double>(guaranteed_delays.size());
    result.guaranteed_delay_mean_s = sum / n;
    result.guaranteed_delay_p95_s = Percentile(guaranteed_delays, 0.95);
    result.guaranteed_delay_max_s = *std::max_element(guaranteed_delays.begin(), guaranteed_delays.end());
    result.guaranteed_within_grace = static_cast<double>(guaranteed_within_grace) / n;
  }
  if (!sprint_weeks.empty()) {
    result.burst_gpu_hours_per_sprint_week = sprint_gpu_s / 3600.0 / static_cast<double>(sprint_weeks.size());
  }
  double sum = 0, sum_sq = 0;
  for (auto& [name, t] : teams) {
    double x = t.demanded_gpu_hours > 0 ? std::min(1.0, t.received_gpu_hours / t.demanded_gpu_hours) : 1.0;
    sum += x;
    sum_sq += x * x;
    result.teams.push_back(t);
  }
  if (!teams.empty() && sum_sq > 0) result.jain_fairness = sum * sum / (static_cast<double>(teams.size()) * sum_sq);
  return result;
}

}  // namespace gpupool::pool::sim
