// gpupool.describe_pool: the pool's nodes and GPUs as plain dicts (what `gpupool devices --json`
// prints).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "gpupool/gpupool.h"
#include "python/bindings.h"

namespace gpupool::python {

namespace {

py::dict GpuToDict(const gpupool::GpuInfo& g) {
  py::list instances;
  for (const gpupool::MigInstance& mi : g.instances) {
    py::list cis;
    for (const gpupool::ComputeInstance& ci : mi.compute_instances) {
      cis.append(py::dict(py::arg("id") = ci.id, py::arg("profile") = ci.profile));
    }
    instances.append(py::dict(py::arg("id") = mi.id, py::arg("profile") = mi.profile,
                              py::arg("start") = mi.start, py::arg("size") = mi.size,
                              py::arg("uuid") = mi.uuid, py::arg("compute_instances") = cis));
  }
  py::dict d;
  d["index"] = g.index;
  d["model"] = g.model;
  d["name"] = g.name;
  d["uuid"] = g.uuid;
  d["memory_mib"] = g.memory_mib;
  d["compute_capability"] = py::make_tuple(g.compute_capability_major, g.compute_capability_minor);
  d["sm_count"] = g.sm_count;
  d["mig_mode"] = g.mig_mode;
  d["instances"] = instances;
  d["nvlink_island"] = g.nvlink_island;
  d["pci_bus_id"] = g.pci_bus_id;
  d["numa_node"] = g.numa_node;
  d["health"] = g.health;
  d["health_reasons"] = g.health_reasons;
  d["temperature_c"] = g.temperature_c;
  d["price_per_hour"] = g.price_per_hour;
  d["labels"] = g.labels;
  return d;
}

}  // namespace

void BindPool(py::module_& m) {
  m.def(
      "describe_pool",
      [](const std::string& driver, const std::string& simulate, int node_count,
         const std::string& config) {
        gpupool::PoolOptions options{driver, simulate, node_count, config};
        gpupool::PoolDescription pool;
        {
          py::gil_scoped_release release;  // discovery may touch the driver for a while
          pool = gpupool::DescribePool(options);
        }
        py::list nodes;
        for (const gpupool::NodeInfo& node : pool.nodes) {
          py::list gpus;
          for (const gpupool::GpuInfo& g : node.gpus) gpus.append(GpuToDict(g));
          nodes.append(py::dict(py::arg("name") = node.name, py::arg("labels") = node.labels,
                                py::arg("gpus") = gpus));
        }
        return py::dict(py::arg("driver") = pool.driver, py::arg("notice") = pool.notice,
                        py::arg("nodes") = nodes);
      },
      py::arg("driver") = "", py::arg("simulate") = "", py::arg("node_count") = 1,
      py::arg("config") = "",
      "Discover the pool: real GPUs when present, else simulated. Returns a dict.");
}

}  // namespace gpupool::python
