# The pool's inventory as it travels between node agents, the head and clients: an agent reports
# its node with this message when it registers, and `gpupool status` receives it from the head.
# Field numbers are the wire contract: add fields at the end, never renumber.
@0xb3a41f6a0c4e8d21;

$import "/capnp/c++.capnp".namespace("gpupool::rpc");

struct ComputeInstance {
  id @0 :UInt32;
  profile @1 :Text;
}

struct MigInstance {
  id @0 :UInt32;
  profile @1 :Text;
  start @2 :UInt8;
  size @3 :UInt8;
  uuid @4 :Text;
  computeInstances @5 :List(ComputeInstance);
}

enum MigMode {
  unsupported @0;
  disabled @1;
  enabled @2;
}

enum Health {
  healthy @0;
  degraded @1;
  draining @2;
  lost @3;
  quarantined @4;  # drained and empty: diagnosed until it passes or fails
  failed @5;       # failed its diagnostics: out of service until repaired
}

struct Label {
  key @0 :Text;
  value @1 :Text;
}

struct Gpu {
  index @0 :UInt32;
  model @1 :Text;
  name @2 :Text;
  uuid @3 :Text;
  memoryMib @4 :UInt64;
  computeCapabilityMajor @5 :UInt8;
  computeCapabilityMinor @6 :UInt8;
  smCount @7 :UInt32;
  migMode @8 :MigMode;
  instances @9 :List(MigInstance);
  nvlinkIsland @10 :Text;
  pciBusId @11 :Text;
  numaNode @12 :Int32;
  health @13 :Health;
  healthReasons @14 :List(Text);
  temperatureC @15 :Int32;
  pricePerHour @16 :Float64;
  labels @17 :List(Label);
}

struct Node {
  name @0 :Text;
  labels @1 :List(Label);
  gpus @2 :List(Gpu);
}

struct PoolInventory {
  driver @0 :Text;
  nodes @1 :List(Node);
}
