#include "pool/sim/trace_reader.h"

#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "pool/placement/pod_request.h"
#include "pool/sim/csv_table.h"

namespace gpupool::pool::sim {
namespace {

// Wraps the repetitive "evaluate, return the error if any" of field reads.
#define GPUPOOL_ASSIGN_OR_RETURN(lhs, expr) \
  auto lhs##_or = (expr);                   \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

constexpr int64_t kMaxTime = std::numeric_limits<int64_t>::max() / 2;

// A time column the file may lack, in a field that may be empty (pods pending when the trace was
// taken have no scheduled_time).
absl::StatusOr<std::optional<int64_t>> OptionalTime(const CsvTable& t, const CsvRow& row,
                                                    std::optional<int> column) {
  if (!column) return std::optional<int64_t>();
  return t.OptionalNonNegativeInt(row, *column, kMaxTime);
}

absl::StatusOr<std::vector<NodeCapacity>> NodesFrom(const CsvTable& t) {
  GPUPOOL_ASSIGN_OR_RETURN(c_name, t.RequireColumn("sn"));
  GPUPOOL_ASSIGN_OR_RETURN(c_cpu, t.RequireColumn("cpu_milli"));
  GPUPOOL_ASSIGN_OR_RETURN(c_mem, t.RequireColumn("memory_mib"));
  GPUPOOL_ASSIGN_OR_RETURN(c_gpu, t.RequireColumn("gpu"));
  GPUPOOL_ASSIGN_OR_RETURN(c_model, t.RequireColumn("model"));
  std::vector<NodeCapacity> nodes;
  absl::flat_hash_map<std::string, int> line_of;
  for (const CsvRow& row : t.rows()) {
    NodeCapacity n;
    GPUPOOL_ASSIGN_OR_RETURN(name, t.Text(row, c_name));
    if (name.empty()) return t.ErrorAt(row.line, row.fields[c_name].column, "empty node name (sn)");
    n.name = std::string(name);
    if (auto [it, inserted] = line_of.emplace(n.name, row.line); !inserted) {
      return t.ErrorAt(row.line, row.fields[c_name].column,
                       absl::StrCat("duplicate node name '", n.name, "' (first on line ",
                                    it->second, ")"));
    }
    GPUPOOL_ASSIGN_OR_RETURN(cpu, t.NonNegativeInt(row, c_cpu, kMaxCpuMilli));
    GPUPOOL_ASSIGN_OR_RETURN(mem, t.NonNegativeInt(row, c_mem, kMaxMemoryMib));
    GPUPOOL_ASSIGN_OR_RETURN(gpus, t.NonNegativeInt(row, c_gpu, kMaxGpusPerNode));
    GPUPOOL_ASSIGN_OR_RETURN(model, t.Text(row, c_model));
    if (gpus > 0 && model.empty()) {
      return t.ErrorAt(row.line, row.fields[c_model].column,
                       "empty GPU model for a node with GPUs");
    }
    n.cpu_milli = cpu;
    n.memory_mib = mem;
    n.num_gpu = static_cast<int>(gpus);
    n.model = std::string(model);
    nodes.push_back(std::move(n));
  }
  return nodes;
}

absl::StatusOr<std::vector<PodSpec>> PodsFrom(const CsvTable& t) {
  GPUPOOL_ASSIGN_OR_RETURN(c_name, t.RequireColumn("name"));
  GPUPOOL_ASSIGN_OR_RETURN(c_cpu, t.RequireColumn("cpu_milli"));
  GPUPOOL_ASSIGN_OR_RETURN(c_mem, t.RequireColumn("memory_mib"));
  GPUPOOL_ASSIGN_OR_RETURN(c_num, t.RequireColumn("num_gpu"));
  GPUPOOL_ASSIGN_OR_RETURN(c_milli, t.RequireColumn("gpu_milli"));
  const std::optional<int> c_spec = t.FindColumn("gpu_spec");
  const std::optional<int> c_qos = t.FindColumn("qos");
  const std::optional<int> c_created = t.FindColumn("creation_time");
  const std::optional<int> c_deleted = t.FindColumn("deletion_time");
  const std::optional<int> c_scheduled = t.FindColumn("scheduled_time");
  std::vector<PodSpec> pods;
  for (const CsvRow& row : t.rows()) {
    PodSpec p;
    GPUPOOL_ASSIGN_OR_RETURN(name, t.Text(row, c_name));
    if (name.empty()) return t.ErrorAt(row.line, row.fields[c_name].column, "empty pod name");
    p.name = std::string(name);
    GPUPOOL_ASSIGN_OR_RETURN(cpu, t.NonNegativeInt(row, c_cpu, kMaxCpuMilli));
    GPUPOOL_ASSIGN_OR_RETURN(mem, t.NonNegativeInt(row, c_mem, kMaxMemoryMib));
    GPUPOOL_ASSIGN_OR_RETURN(num, t.NonNegativeInt(row, c_num, kMaxGpusPerNode));
    GPUPOOL_ASSIGN_OR_RETURN(milli, t.NonNegativeInt(row, c_milli, placement::kMilliPerGpu));
    if (num > 0 && milli == 0) {
      return t.ErrorAt(row.line, row.fields[c_milli].column,
                       "gpu_milli must be 1..1000 for a pod with num_gpu > 0");
    }
    if (num == 0 && milli != 0) {
      return t.ErrorAt(row.line, row.fields[c_milli].column,
                       "gpu_milli must be 0 for a pod with num_gpu 0");
    }
    p.cpu_milli = cpu;
    p.memory_mib = mem;
    p.num_gpu = static_cast<int>(num);
    p.gpu_milli = static_cast<int>(milli);
    if (c_spec && *c_spec < static_cast<int>(row.fields.size())) {
      p.gpu_spec = row.fields[*c_spec].text;
    }
    if (c_qos && *c_qos < static_cast<int>(row.fields.size())) p.qos = row.fields[*c_qos].text;
    GPUPOOL_ASSIGN_OR_RETURN(created, OptionalTime(t, row, c_created));
    GPUPOOL_ASSIGN_OR_RETURN(deleted, OptionalTime(t, row, c_deleted));
    GPUPOOL_ASSIGN_OR_RETURN(scheduled, OptionalTime(t, row, c_scheduled));
    p.creation_time = created;
    p.deletion_time = deleted;
    p.scheduled_time = scheduled;
    pods.push_back(std::move(p));
  }
  return pods;
}

#undef GPUPOOL_ASSIGN_OR_RETURN

}  // namespace

absl::StatusOr<std::vector<NodeCapacity>> ParseNodeList(std::string_view text, std::string source) {
  absl::StatusOr<CsvTable> table = CsvTable::Parse(text, std::move(source));
  if (!table.ok()) return table.status();
  return NodesFrom(*table);
}

absl::StatusOr<std::vector<PodSpec>> ParsePodList(std::string_view text, std::string source) {
  absl::StatusOr<CsvTable> table = CsvTable::Parse(text, std::move(source));
  if (!table.ok()) return table.status();
  return PodsFrom(*table);
}

absl::StatusOr<std::vector<NodeCapacity>> ReadNodeList(const std::string& path) {
  absl::StatusOr<CsvTable> table = CsvTable::ReadFile(path);
  if (!table.ok()) return table.status();
  return NodesFrom(*table);
}

absl::StatusOr<std::vector<PodSpec>> ReadPodList(const std::string& path) {
  absl::StatusOr<CsvTable> table = CsvTable::ReadFile(path);
  if (!table.ok()) return table.status();
  return PodsFrom(*table);
}

}  // namespace gpupool::pool::sim
