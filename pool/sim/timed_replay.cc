#include "pool/sim/timed_replay.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <queue>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "pool/placement/policy_registry.h"

namespace gpupool::pool::sim {
namespace {

struct Running {
  int node;
  placement::GpuIndices gpus;
  int64_t started_s;
  int64_t ends_s;
};

// A pod's shape as a key: pods of the same shape fail alike while capacity has only shrunk.
std::tuple<int64_t, int64_t, int, int, std::string> ShapeKey(const PodSpec& p) {
  return {p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_spec};
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

}  // namespace

absl::StatusOr<TimedResult> RunTimed(std::span<const NodeCapacity> nodes,
                                     std::span<const PodSpec> all_pods, const TimedOptions& options) {
  auto wall_start = std::chrono::steady_clock::now();
  absl::StatusOr<placement::ClusterState> state = placement::ClusterState::Create(nodes);
  if (!state.ok()) return state.status();
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
  if (!(options.compress >= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("--compress must be at least 1, got ", options.compress));
  }
  for (PodSpec& p : pods) {
    // Keep each pod's runtime; move only when it arrives.
    int64_t start = p.scheduled_time.value_or(*p.creation_time);
    int64_t run = *p.deletion_time - start;
    p.creation_time = static_cast<int64_t>(static_cast<double>(*p.creation_time) / options.compress);
    p.scheduled_time.reset();
    p.deletion_time = *p.creation_time + std::max<int64_t>(1, run);
  }
  std::stable_sort(pods.begin(), pods.end(),
                   [](const PodSpec& a, const PodSpec& b) { return *a.creation_time < *b.creation_time; });
  placement::PolicyContext context;
  context.models = &state->models();
  context.seed = options.seed;
  for (const PodSpec& p : pods) context.workload.push_back(ToShapeSample(p));
  absl::StatusOr<std::unique_ptr<placement::PlacementPolicy>> policy =
      placement::MakePolicy(options.policy, context);
  if (!policy.ok()) return policy.status();
  std::vector<placement::PodRequest> requests;
  std::vector<int64_t> runtime;
  for (const PodSpec& p : pods) {
    requests.push_back(ToRequest(p, state->models()));
    int64_t start = p.scheduled_time.value_or(*p.creation_time);
    runtime.push_back(std::max<int64_t>(1, *p.deletion_time - start));
  }

  TimedResult result;
  result.policy = std::string(placement::CanonicalPolicyName(options.policy));
  result.pods = static_cast<int64_t>(pods.size());
  const double cluster_milli = static_cast<double>(state->total_gpu_milli());
  // Events: (time, kind 0 = departure first so room frees before arrivals, index).
  std::priority_queue<std::tuple<int64_t, int, size_t>, std::vector<std::tuple<int64_t, int, size_t>>,
                      std::greater<>> events;
  for (size_t i = 0; i < pods.size(); ++i) events.push({*pods[i].creation_time, 1, i});
  std::deque<size_t> queue;
  std::map<size_t, Running> running;
  std::vector<int64_t> generation(pods.size(), 0);  // invalidates departures of evicted runs
  std::map<size_t, double> delay_of;  // creation to (latest) start
  double jct_sum = 0, allocated_milli = 0, allocation_area = 0;
  int64_t now = *pods.front().creation_time, next_sample = now;
  const int64_t first = now;
  int64_t last_time = now, last_arrival = now;
  for (const PodSpec& p : pods) {
    last_time = std::max(last_time, *p.deletion_time);
    last_arrival = std::max(last_arrival, *p.creation_time);
  }
  std::map<size_t, int64_t> departure_generation;

  auto start_pod = [&](size_t i, const placement::Decision& d) {
    state->Apply(d.node, requests[i], d.gpus);
    running[i] = {d.node, d.gpus, now, now + runtime[i]};
    allocated_milli += static_cast<double>(requests[i].gpu_demand_milli());
    delay_of[i] = static_cast<double>(now - *pods[i].creation_time);
    events.push({now + runtime[i], 0, i});
    departure_generation[i] = generation[i];
  };
  // LS pods that find no room may evict BE pods of one node: the node where the fewest GPU-milli
  // of BE work must go, whose freed room then fits the pod.
  auto try_preempt = [&](size_t i) {
    if (!options.preemption || pods[i].qos != "LS") return false;
    std::map<int, std::vector<size_t>> be_by_node;
    for (const auto& [j, r] : running) {
      if (pods[j].qos == "BE") be_by_node[r.node].push_back(j);
    }
    for (const auto& [node, victims] : be_by_node) {
      std::vector<size_t> chosen;
      for (size_t j : victims) {
        state->Release(node, requests[j], running.at(j).gpus);
        chosen.push_back(j);
        placement::Decision d = (*policy)->Decide(state->view(), requests[i]);
        if (d.placed() && d.node == node) {
          for (size_t v : chosen) {
            const Running& r = running.at(v);
            result.gpu_hours_lost += static_cast<double>(requests[v].gpu_demand_milli()) / 1000.0 *
                                     static_cast<double>(now - r.started_s) / 3600.0;
            allocated_milli -= static_cast<double>(requests[v].gpu_demand_milli());
            ++generation[v];
            running.erase(v);
            queue.push_front(v);
            ++result.preemptions;
          }
          start_pod(i, d);
          return true;
        }
      }
      for (size_t j : chosen) state->Apply(node, requests[j], running.at(j).gpus);  // undo
    }
    return false;
  };
  auto schedule = [&] {
    std::set<std::tuple<int64_t, int64_t, int, int, std::string>> failed, unpreemptable;
    for (auto it = queue.begin(); it != queue.end();) {
      size_t i = *it;
      auto key = ShapeKey(pods[i]);
      if (!failed.contains(key)) {
        placement::Decision d = (*policy)->Decide(state->view(), requests[i]);
        if (d.placed()) {
          start_pod(i, d);
          it = queue.erase(it);
          continue;
        }
        failed.insert(key);
      }
      if (!unpreemptable.contains(key) && try_preempt(i)) {
        it = std::find(queue.begin(), queue.end(), i);  // evictions were pushed to the front
        it = queue.erase(it);
        continue;
      }
      if (pods[i].qos == "LS") unpreemptable.insert(key);
      ++it;
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
        queue.push_back(j);
        changed = true;
        continue;
      }
      auto r = running.find(j);
      if (r == running.end() || departure_generation[j] != generation[j]) continue;  // evicted
      state->Release(r->second.node, requests[j], r->second.gpus);
      allocated_milli -= static_cast<double>(requests[j].gpu_demand_milli());
      jct_sum += static_cast<double>(now - *pods[j].creation_time);
      ++result.completed;
      running.erase(r);
      changed = true;
    }
    if (changed) schedule();
    if (options.progress) options.progress(now - first, last_time - first);
  }
  result.never_placed = static_cast<int64_t>(queue.size());
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
