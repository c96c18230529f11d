# The lease protocol between a job runtime and the pool service (head), DESIGN §3. A job
# authenticates as a team and gets a Session capability; through it the job asks for leases and
# gives them back, and the head calls the job's LeaseListener when a lease is granted, revoked or
# lost. A session holds only its own requests and leases: naming another's is refused.
# Field numbers are the wire contract: add fields at the end, never renumber.
@0xd6c1a5e3b2f49a07;

$import "/capnp/c++.capnp".namespace("gpupool::rpc");
using Inventory = import "pool_inventory.capnp";

# The outcome of a call that can be refused. `code` is an absl::StatusCode (0 = OK); `message`
# names what was wrong.
struct Status {
  code @0 :UInt32;
  message @1 :Text;
}

enum SlotKind {
  wholeGpu @0;
  mig @1;
  mps @2;
  fraction @3;
}

struct SlotShape {
  kind @0 :SlotKind;
  migProfile @1 :Text;
  mpsThreadPercentage @2 :Int32;
  memoryMib @3 :Int64;
  computeMilli @4 :Int32;
  cpuMilli @5 :Int64;       # host CPU beside the GPU share, on its node
  hostMemoryMib @6 :Int64;  # host memory beside the GPU share, on its node
}

enum GangTopology {
  any @0;
  sameNode @1;
  sameNvLinkIsland @2;
}

struct LeaseRequest {
  id @0 :Text;                 # unique among this session's live requests
  team @1 :Text;               # empty: the session's team; another team is refused
  project @2 :Text;
  workloadClass @3 :Text;
  priorityClass @4 :Text;
  slotCount @5 :Int32;
  slot @6 :SlotShape;
  allowedModels @7 :List(Text);
  requiredLabels @8 :List(Inventory.Label);
  forbiddenLabels @9 :List(Inventory.Label);
  minGpuMemoryMib @10 :Int64;
  nvlinkRequired @11 :Bool;
  topology @12 :GangTopology;
  hardwareIsolation @13 :Bool;
  hasRuntimeEstimate @14 :Bool;
  runtimeEstimateS @15 :Int64;
  preferredNodes @16 :List(Text);  # soft: among equally good placements, these nodes first
}

struct GpuRef {
  node @0 :Text;
  index @1 :Int32;
}

struct Lease {
  id @0 :Text;                 # opaque to the job; what release() takes
  request @1 :LeaseRequest;    # as the job sent it
  gpus @2 :List(GpuRef);       # one per slot
  group @3 :Text;
  milli @4 :Int64;
  borrowing @5 :Bool;
  startedS @6 :Int64;
  lastCheckpointS @7 :Int64;
  hasRevokeDeadline @8 :Bool;
  revokeDeadlineS @9 :Int64;
  revokedFor @10 :Text;
  hasGuaranteedWait @11 :Bool;
  guaranteedWaitS @12 :Int64;
}

enum RevokeCause {
  reclaim @0;
  priority @1;
  drain @2;
  move @3;  # defragmentation: stop and be placed again where there is room now
}

# Implemented by the job; the head calls it, in order, for the leases of one request.
interface LeaseListener {
  granted @0 (lease :Lease);
  # Stop at a safe point before `deadlineS` (pool time), then release.
  revoked @1 (leaseId :Text, cause :RevokeCause, deadlineS :Float64);
  # The lease is gone (its GPU failed, or the deadline passed); do not release it.
  lost @2 (leaseId :Text, why :Text);
}

# What a job needs to know of the head it leases from.
struct HeadInfo {
  poolNowS @0 :Float64;      # the pool clock when the reply was built
  clockSpeed @1 :Float64;    # pool seconds per real second
  configYaml @2 :Text;       # the head's configuration (teams, quotas, priority classes); "" = default
  capacityGpus @3 :Float64;
  driver @4 :Text;           # what the pool's GPUs are: "nvidia" or "simulated"
  durable @5 :Bool;          # the head keeps a journal: its leases outlive a restart (reclaim)
  reclaimWindowS @6 :Float64; # how long a lost job's leases are kept for it to reclaim (0: not)
}

struct HeldLease {
  leaseId @0 :Text;
  listener @1 :LeaseListener;  # hears of the lease from now on
}

struct QueuedRequest {
  requestId @0 :Text;          # the job's id for it, as it sent it
  listener @1 :LeaseListener;  # hears of its grant from now on
}

# A team's authenticated connection. Dropping it (or disconnecting) withdraws its pending
# requests and releases its leases, except for a job with a key on a head with a journal, whose
# requests and leases are kept for it to reclaim (see reclaim) unless it said `leave` first.
interface Session {
  # When the request is admitted at once, the answer carries the lease (and the listener is not
  # called for it): one message instead of a listener call and its acknowledgements, as Ray's
  # lease replies do. Otherwise `granted` is unset and the listener hears of the grant later.
  request @0 (request :LeaseRequest, listener :LeaseListener) -> (status :Status, granted :Lease);
  withdraw @1 (requestId :Text) -> (status :Status);
  # `busyGpuSeconds`: pool seconds x GPUs that the job's tasks ran on the lease (the ledger's busy
  # time, for usage's efficiency); negative when the job does not say.
  release @2 (leaseId :Text, busyGpuSeconds :Float64 = -1) -> (status :Status);
  info @3 () -> (info :HeadInfo);
  # One node's GPUs as the head knows them (an encoded Inventory.PoolInventory with that node),
  # so a job process learns the GPUs it will run tasks on. NotFound for an unknown node.
  describeNode @4 (name :Text) -> (status :Status, inventory :Data);
  # A task on one of this session's leases committed snapshot `version` (at `step`) under its
  # checkpoint key: the scheduler counts the lease's work at risk from now on (reclaim and
  # preemption pick the victims that lose least), and the head's checkpoint index records it.
  checkpointed @5 (leaseId :Text, taskKey :Text, version :UInt64, step :Int64, path :Text) -> (status :Status);
  # The task is done: its snapshots are gone, and so are its entries in the index. Only keys this
  # session recorded.
  forgetCheckpoints @6 (taskKey :Text) -> (status :Status);
  # After the head restarted, or the job's connection was lost: the leases the job still holds
  # and the requests it still waits on (a restarted head took both back from its journal; either
  # way the head keeps them for its reclaim window, and the requests keep their place in the
  # queue). `kept` lists the leases that are now this session's; the job has lost the others
  # (released meanwhile, or granted to another job key). `queued` lists the requests that are now
  # this session's, still queued or granted meanwhile (the listener hears of that grant); the job
  # sends the others again. Whatever the head kept for this job and the job did not name goes
  # back to the pool at once.
  reclaim @7 (leases :List(HeldLease), requests :List(QueuedRequest)) -> (kept :List(Text), queued :List(Text));
  # The job is ending: when this connection closes, what it still holds goes back at once (a
  # connection lost without this is kept for the job to reclaim, when it has a key).
  leave @8 () -> ();
  # Asks the agent of `launch.node` for a worker process of this job (runtime/rpc/worker_launch.h).
  # A session starts workers of one job only: the job id its first call names (another is
  # refused), so that ending the session stops that job's workers and no other. The answer is the
  # agent's: the worker's pid, or why it did not start (no agent on the node, an agent too old to
  # start workers, a missing executable, a refusal to run it as root).
  startWorker @9 (launch :WorkerLaunch) -> (status :Status, pid :Int32);
}

struct EnvVar {
  name @0 :Text;
  value @1 :Text;
}

# A worker process of a job, as the job asks for it (runtime/rpc/worker_launch.h says what each
# field means).
struct WorkerLaunch {
  node @0 :Text;
  job @1 :Text;
  executable @2 :Text;
  args @3 :List(Text);
  cwd @4 :Text;
  env @5 :List(EnvVar);
  secret @6 :Text;
}

# Implemented by a node agent; the head calls it, on a job's word (Session.startWorker), for the
# jobs it vouches for. The agent acts on nothing else.
interface AgentControl {
  # Starts a worker of `launch.job` as the OS user `runAs` (the team's `run_as` in the head's
  # configuration; "" when it has none), for team `team` (named in a refusal). The worker's pid,
  # or why it did not start.
  startWorker @0 (launch :WorkerLaunch, runAs :Text, team :Text) -> (status :Status, pid :Int32);
  # Stops every worker of `job` on this node (their process groups: SIGTERM, then SIGKILL).
  stopJob @1 (job :Text) -> ();
  # Work was placed on the GPU of diagnostic lease `leaseId` (or the GPU left service): stop the
  # test now; its outcome will not be applied.
  stopDiagnostic @2 (leaseId :Text, why :Text) -> ();
}

# A node agent's connection: while it is open and heartbeats arrive, the node's GPUs are
# schedulable; when it closes or falls silent, they are lost and their leases revoked as lost.
interface AgentSession {
  # With `wantGpus`, the answer says how the head sees each of the node's GPUs, so the agent knows
  # which to diagnose (idle or quarantined ones): it costs the head a pass over its leases, so an
  # agent asks only as often as its diagnostics need. An older head answers with an empty list.
  heartbeat @0 (wantGpus :Bool) -> (gpus :List(GpuHealthState));
  # The agent's health verdict for one of its GPUs (AssessHealth of a reading: not sticky; the
  # head's state machine decides what it means), with its reasons.
  reportHealth @1 (gpuIndex :Int32, health :Inventory.Health, reasons :List(Text)) -> (status :Status);
  # A diagnostic the agent ran on one of its GPUs (a memory pattern test, a known-answer matmul).
  reportDiagnostic @2 (gpuIndex :Int32, passed :Bool, detail :Text, durationS :Float64) -> (status :Status);
  # The operators' health-check program ran on the node (`--health-check-program`); a failure
  # drains the whole node with its output as the reason.
  reportNodeCheck @3 (passed :Bool, output :Text) -> (status :Status);
  # A lease for a diagnostic on one of the agent's GPUs (team `_pool`, workload class
  # `diagnostics`, outside quotas; runtime/service/diagnostic_holds.h), granted now or refused
  # with the reason (work holds the GPU, it is draining, ...). Work placed on the GPU ends it at
  # once: AgentControl.stopDiagnostic says so. A head older than this answers "unimplemented":
  # the agent then runs the test without a lease and reports it with reportDiagnostic.
  beginDiagnostic @4 (gpuIndex :Int32) -> (status :Status, leaseId :Text);
  # The test ended: releases the lease and applies the outcome, as reportDiagnostic, unless
  # `concluded` is false (it could not run, or it was stopped). Aborted, applying nothing, when
  # the lease was interrupted meanwhile.
  endDiagnostic @5 (leaseId :Text, concluded :Bool, passed :Bool, detail :Text, durationS :Float64)
      -> (status :Status);
}

struct GpuHealthState {
  index @0 :Int32;
  health @1 :Inventory.Health;
  leased @2 :Bool;   # some lease holds it now
}

# The head's bootstrap capability.
interface PoolService {
  # `session` is null unless status.code is 0.
  # `jobKey`: a secret the job makes once and presents on every connection (empty: none). A job
  # with one may reclaim its leases after a head restart or a lost connection (Session.reclaim);
  # the head then keeps a vanished session's leases for its reclaim window instead of releasing
  # them at once.
  authenticate @0 (team :Text, token :Text, jobKey :Text) -> (status :Status, session :Session);
  # A node agent registers its node: `inventory` is an encoded Inventory.PoolInventory holding
  # exactly that node, which must be one the head was configured with (same GPUs). `control` is
  # how the head asks the agent for workers; an agent older than workers sends none, and the head
  # then refuses jobs' workers on its node.
  registerAgent @1 (token :Text, inventory :Data, control :AgentControl) -> (status :Status, agent :AgentSession);
  # The pool's views (`gpupool status`, `queue`), for the operators', the agents' or a team's
  # token; a team's sees the pool's totals and its own rows only.
  describe @2 (token :Text) -> (status :Status, report :Text);
  # GPU-hours and their cost from the head's journal over [fromS, toS) (Unix seconds), grouped by
  # "team", "project", "class", "workload", "model" or "cost-center": a JSON object whose `rows`
  # are the groups, for `gpupool usage`. `idleShare`: idle capacity's cost spread over the rows.
  usage @3 (token :Text, fromS :Float64, toS :Float64, groupBy :Text, idleShare :Bool)
      -> (status :Status, report :Text);
  # What pooling saved over [fromS, toS) against dedicated fleets (`gpupool savings`): JSON.
  savings @4 (token :Text, fromS :Float64, toS :Float64) -> (status :Status, report :Text);
  # An operator's word on GPUs (`gpupool gpu drain|resume|repaired`, `gpupool node drain|resume`):
  # `action` is "drain", "resume" or "repaired"; `gpuIndex` -1 means every GPU of `node`; `who`
  # names the operator for the journal. The operators' token only. `report` lists what changed.
  operateGpus @5 (token :Text, action :Text, node :Text, gpuIndex :Int32, reason :Text, who :Text)
      -> (status :Status, report :Text);
}
