// File: pool/sim/lease_simulation.h
//
// Drives the real pool scheduler with a job list over simulated time, as the head would drive it
// with real jobs: jobs arrive and ask for leases, granted leases run until their work is done,
// revoked leases stop at their next safe point (checkpointable jobs keep their progress and pay a
// restart; others lose it) and are requeued. Run twice on the same jobs it answers the question
// a pool exists for: what do teams get when they share versus when each owns its quota?
//
//   LeaseSimulationResult pooled = SimulateLeases(inventory, config, jobs, {.pooled = true});
//   LeaseSimulationResult dedicated = SimulateLeases(inventory, config, jobs, {.pooled = false});
//
// Dedicated mode is the same scheduler with borrowing and lending switched off: each team gets
// exactly its nominal quota, as with statically owned GPUs.
#ifndef GPUPOOL_POOL_SIM_LEASE_SIMULATION_H_
#define GPUPOOL_POOL_SIM_LEASE_SIMULATION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "pool/config/scheduling_config.h"
#include "pool/inventory.h"
#include "pool/scheduler/scheduler.h"
#include "pool/sim/team_workload.h"

namespace gpupool::pool::sim {

struct LeaseSimulationOptions {
  bool pooled = true;
  int64_t horizon_s = 0;            // 0: the last arrival plus one day
  int64_t safe_point_s = 30;        // a revoked task reaches a safe point this soon
  int64_t restart_overhead_s = 60;  // loading a checkpoint on the new slot
  // Checkpointable jobs commit a snapshot every `checkpoint_interval_s` of their priority class
  // (the runtime forces it, ../shared/DESIGN.md §5) and on revocation at their safe point; the
  // scheduler is told of each, so its victim choice sees the work really at risk.
  // Called once per simulated day with (simulated seconds, horizon), for progress output.
  std::function<void(int64_t, int64_t)> progress;
  SchedulerOptions scheduler;  // e.g. defragmentation off, to measure what it brings
};

struct TeamFigures {
  std::string team;
  double demanded_gpu_hours = 0;  // work of its jobs that arrived
  double received_gpu_hours = 0;  // GPU-hours its leases held
  double lost_gpu_hours = 0;      // progress thrown away by preemption
  int preemptions = 0;
};

// Utilisation is measured the same way for both runs: GPU-hours of work over capacity x horizon.
// "Held" counts every GPU-hour a lease held; "busy" (mean_utilisation) leaves out what preemption
// wasted there: progress thrown away (work since the last checkpoint, all of it for a job that
// cannot checkpoint) and the time a resumed job spends loading its checkpoint. The difference is
// the price of sharing, so the pooled/dedicated ratio is taken on busy hours.
struct LeaseSimulationResult {
  std::string mode;               // "pooled" | "dedicated"
  double capacity_gpus = 0;
  double horizon_hours = 0;
  double offered_load = 0;        // work of the jobs that arrived / (capacity x horizon)
  double mean_utilisation = 0;    // busy GPU-hours / (capacity x horizon)
  double held_utilisation = 0;    // GPU-hours held by leases / (capacity x horizon)
  // GPU-hours of free capacity while at least one request waited: an upper bound on what the
  // scheduler itself (ordering, reservations, placement, quota rules) left unused. Part of it is
  // capacity no waiting request could use (a fragment too small, a team at its limit).
  double idle_while_waiting_gpu_hours = 0;
  // The part of it that waiting work fit by placement alone (Scheduler::WaitingMilliThatFitsNow):
  // capacity left idle by quotas, reservations, grace periods, ordering or the spare reserve.
  double idle_while_fitting_work_waited_gpu_hours = 0;
  // Requests once within their team's nominal quota (as the scheduler saw them): how long from
  // then until admitted. Requests still waiting at the horizon are not counted.
  int guaranteed_requests = 0;
  double guaranteed_delay_mean_s = 0;
  double guaranteed_delay_p95_s = 0;
  double guaranteed_delay_max_s = 0;
  // Fraction admitted within the grace period of their own priority class (the promise:
  // "admitted within its class's grace period").
  double guaranteed_within_grace = 0;
  double burst_gpu_hours_per_sprint_week = 0;  // sprint work done, per team sprint-week
  double lost_gpu_hours = 0;      // progress thrown away by preemption
  double restart_gpu_hours = 0;   // spent loading checkpoints after preemption
  int preemptions = 0;
  int moves = 0;                  // of those, leases moved to defragment (RevokeCause::kMove)
  // Revocations for a job's request whose victim job had earlier preempted that same job (A takes
  // B's GPUs, then B takes A's back): the thrashing a scheduler must never enter.
  int preemption_loops = 0;
  double jain_fairness = 0;       // over teams' received / demanded
  // GPU-hours held by leases each day of the horizon, over capacity x that day's length: the
  // utilisation over time (the last day may be partial).
  std::vector<double> held_by_day;
  // Per priority class, every job's time to admission: from its arrival to its first grant
  // (seconds; jobs never admitted are left out, and counted in jobs_abandoned or unfinished).
  std::map<std::string, std::vector<double>> admission_wait_s;
  int jobs_completed = 0;
  int jobs_abandoned = 0;         // gave up waiting (patience) before they ever started
  int jobs_unfinished = 0;
  std::vector<TeamFigures> teams;
};

LeaseSimulationResult SimulateLeases(const Inventory& inventory, const SchedulingConfig& config,
                                     const std::vector<SimJob>& jobs,
                                     const LeaseSimulationOptions& options);

}  // namespace gpupool::pool::sim

#endif  // GPUPOOL_POOL_SIM_LEASE_SIMULATION_H_
