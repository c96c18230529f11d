#include "pool/sim/timed_replay.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <queue>
#include <tuple>

#include <numeric>

#include "absl/strings/str_cat.h"
#include "pool/config/scheduling_config.h"
#include "pool/placement/policy_registry.h"
#include "pool/scheduler/scheduler.h"
#include "pool/sim/trace_pool.h"

namespace gpupool::pool::sim {
namespace {

struct Running {
  std::string lease_id;
  int64_t started_s;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// The trace's QoS as the pool's priority classes, all of one team: latency-sensitive pods may
// preempt best-effort ones (a request may preempt strictly lower-priority leases of its own
// team), and nothing waits for a grace period: the trace has no checkpoints, so an evicted pod
// restarts from scratch.
SchedulingConfig TimedConfig() {
  SchedulingConfig config;
  config.priority_classes = {
      {"LS", 1000, /*preemptible=*/true, /*grace=*/0, /*checkpoint=*/0},
      {"other", 500, true, 0, 0},
      {"BE", 100, true, 0, 0},
  };
  return config;
}

}  // namespace

absl::StatusOr<TimedResult> RunTimed(std::span<const NodeCapacity> nodes,
                                     std::span<const PodSpec> all_pods, const TimedOptions& options) {
  auto wall_start = std::chrono::steady_clock::now();
  absl::StatusOr<placement::ClusterState> cluster = placement::ClusterState::Create(nodes);
  if (!cluster.ok()) return cluster.status();
  // GPU pods with times only: CPU-only pods do not change GPU allocation and are left out.
  std::vector<PodSpec> pods;
  for (const PodSpec& p : all_pods) {
    if (p.num_gpu == 0) continue;
    if (!p.creation_time || !p.deletion_time) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pod ", p.name, " has no creation_time/deletion_time: this pod list cannot be replayed in time"));
    }
    pods.push_back(p);
  }
  if (pods.empty()) return absl::InvalidArgumentError("the pod list has no GPU pod to replay");
  if (!(options.compress >= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("--compress must be at least 1, got ", options.compress));
  }
  std::vector<int64_t> runtime;
  for (PodSpec& p : pods) {
    // Keep each pod's runtime; move only when it arrives.
    int64_t start = p.scheduled_time.value_or(*p.creation_time);
    runtime.push_back(std::max<int64_t>(1, *p.deletion_time - start));
    p.creation_time = static_cast<int64_t>(static_cast<double>(*p.creation_time) / options.compress);
    p.scheduled_time.reset();
    p.deletion_time = *p.creation_time + runtime.back();
  }
  {
    std::vector<size_t> order(pods.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return *pods[a].creation_time < *pods[b].creation_time; });
    std::vector<PodSpec> sorted_pods;
    std::vector<int64_t> sorted_runtime;
    for (size_t i : order) {
      sorted_pods.push_back(pods[i]);
      sorted_runtime.push_back(runtime[i]);
    }
    pods = std::move(sorted_pods);
    runtime = std::move(sorted_runtime);
  }
  absl::StatusOr<Inventory> inventory = TraceInventory(nodes);
  if (!inventory.ok()) return inventory.status();
  absl::StatusOr<SchedulerOptions> scheduler_options = TraceSchedulerOptions(options.policy, pods, options.seed);
  if (!scheduler_options.ok()) return scheduler_options.status();
  const SchedulingConfig config = TimedConfig();
  Scheduler scheduler(*inventory, config, *scheduler_options);

  TimedResult result;
  result.policy = scheduler_options->placement_policy;
  result.pods = static_cast<int64_t>(pods.size());
  const double cluster_milli = static_cast<double>(cluster->total_gpu_milli());
  // Events: (time, kind 0 = departure first so room frees before arrivals, index).
  std::priority_queue<std::tuple<int64_t, int, size_t>, std::vector<std::tuple<int64_t, int, size_t>>,
                      std::greater<>> events;
  for (size_t i = 0; i < pods.size(); ++i) events.push({*pods[i].creation_time, 1, i});
  std::map<size_t, Running> running;
  std::map<std::string, size_t> pod_of_request;  // pending and running request ids
  std::vector<int64_t> attempt(pods.size(), 0);  // request ids are "<pod>#<attempt>"
  std::vector<int64_t> departure_attempt(pods.size(), -1);
  std::map<size_t, double> delay_of;  // creation to (latest) start
  double jct_sum = 0, allocated_milli = 0, allocation_area = 0;
  int64_t now = *pods.front().creation_time, next_sample = now;
  const int64_t first = now;
  int64_t last_time = now, last_arrival = now;
  for (const PodSpec& p : pods) {
    last_time = std::max(last_time, *p.deletion_time);
    last_arrival = std::max(last_arrival, *p.creation_time);
  }
  auto submit = [&](size_t i) -> absl::Status {
    LeaseRequest r = TraceRequest(pods[i], absl::StrCat(i, "#", attempt[i]));
    const bool ranked = options.preemption && (pods[i].qos == "LS" || pods[i].qos == "BE");
    r.priority_class = ranked ? pods[i].qos : "other";
    absl::StatusOr<std::string> id = scheduler.Submit(std::move(r), now);
    if (!id.ok()) return id.status();
    pod_of_request[*id] = i;
    return absl::OkStatus();
  };
  // Cycles until nothing changes: evicted pods stop at once (no grace), go back to the queue
  // and the cycle after places what their room was freed for.
  auto schedule = [&] {
    for (;;) {
      CycleResult c = scheduler.Schedule(now);
      for (const std::string& lease_id : c.granted) {
        const Lease& lease = scheduler.leases().at(lease_id);
        const size_t i = pod_of_request.at(lease.request.id);
        running[i] = {lease_id, now};
        allocated_milli += static_cast<double>(pods[i].gpu_demand_milli());
        delay_of[i] = static_cast<double>(now - *pods[i].creation_time);
        departure_attempt[i] = attempt[i];
        events.push({now + runtime[i], 0, i});
      }
      for (const Revocation& v : c.revoked) {
        const Lease& lease = scheduler.leases().at(v.lease_id);
        const size_t i = pod_of_request.at(lease.request.id);
        const Running r = running.at(i);
        result.gpu_hours_lost += static_cast<double>(pods[i].gpu_demand_milli()) / 1000.0 *
                                 static_cast<double>(now - r.started_s) / 3600.0;
        allocated_milli -= static_cast<double>(pods[i].gpu_demand_milli());
        running.erase(i);
        pod_of_request.erase(lease.request.id);
        (void)scheduler.Release(v.lease_id, now);
        ++attempt[i];
        ++result.preemptions;
        (void)submit(i);  // it was accepted before: the pool has not changed shape since
      }
      if (c.revoked.empty()) return;
    }
  };

  while (!events.empty()) {
    auto [t, kind, i] = events.top();
    // The mean is taken over the arrival window: after the last arrival the cluster only drains.
    if (now < last_arrival) {
      allocation_area += allocated_milli * static_cast<double>(std::min(t, last_arrival) - now);
    }
    while (next_sample <= t) {
      result.allocation_samples.push_back(allocated_milli / cluster_milli);
      next_sample += options.sample_interval_s;
    }
    now = t;
    bool changed = false;
    while (!events.empty() && std::get<0>(events.top()) == now) {
      auto [tt, k, j] = events.top();
      events.pop();
      if (k == 1) {
        // A pod the pool can never hold is refused at once, as the head refuses it: it never
        // places and is counted so.
        if (submit(j).ok()) changed = true;
        continue;
      }
      auto r = running.find(j);
      if (r == running.end() || departure_attempt[j] != attempt[j]) continue;  // evicted
      (void)scheduler.Release(r->second.lease_id, now);
      pod_of_request.erase(absl::StrCat(j, "#", attempt[j]));
      allocated_milli -= static_cast<double>(pods[j].gpu_demand_milli());
      jct_sum += static_cast<double>(now - *pods[j].creation_time);
      ++result.completed;
      running.erase(r);
      changed = true;
    }
    if (changed) schedule();
    if (options.progress) options.progress(now - first, last_time - first);
  }
  result.never_placed = result.pods - result.completed;
  std::vector<double> delays;
  for (const auto& [i, d] : delay_of) delays.push_back(d);
  double span = static_cast<double>(std::max<int64_t>(1, last_arrival - first));
  result.mean_gpu_allocation = allocation_area / cluster_milli / span;
  if (!delays.empty()) {
    double sum = 0;
    for (double d : delays) sum += d;
    result.queue_delay_mean_s = sum / static_cast<double>(delays.size());
    result.queue_delay_p50_s = Percentile(delays, 0.50);
    result.queue_delay_p95_s = Percentile(delays, 0.95);
    result.queue_delay_p99_s = Percentile(delays, 0.99);
  }
  if (result.completed > 0) result.jct_mean_s = jct_sum / static_cast<double>(result.completed);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

}  // namespace gpupool::pool::sim
