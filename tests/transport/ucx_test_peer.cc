// The peer process of the transport tests (see test_peer_process.h). Lines on stdout:
//   address <hex>                 its UCX worker address
//   object <id> <xxh64>           (owner) each object it serves
//   ready                         set up; from now on it serves / fetches
//   fetched <size> <xxh64>        (fetcher) after each fetch; "failed <message>" on an error
// It exits when its stdin reaches EOF (the test closed the pipe or died).
//
//   ucx_test_peer owner   --transports=T --name=N --sizes=0,1,1048576
//   ucx_test_peer fetcher --transports=T --name=N --owner=HEX --id=ID [--count=K]
//   ucx_test_peer rank    --transports=T --rank=R [--await_go=1]
// A rank reads "addresses HEX,HEX,..." (every rank's, in rank order) from stdin, creates a
// HostCommunicator, prints "joined", waits for a "go" line if asked to, runs
// RunCollectiveChecks and prints "check <failure>" per failed check, then "checks done".
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tests/transport/collective_checks.h"
#include "tests/transport/test_peer_process.h"
#include "transport/host_communicator.h"
#include "transport/object_transfer.h"
#include "transport/ucx_worker.h"

namespace gpupool::transport::testing {
namespace {

bool StdinClosed(int timeout_ms) {
  pollfd fd{STDIN_FILENO, POLLIN, 0};
  if (poll(&fd, 1, timeout_ms) <= 0) return false;
  char c;
  return read(STDIN_FILENO, &c, 1) <= 0;
}

std::string ReadStdinLine() {
  std::string line;
  char c;
  while (read(STDIN_FILENO, &c, 1) == 1 && c != '\n') line.push_back(c);
  return line;
}

int RunRank(UcxWorker& worker, int rank, bool await_go) {
  std::printf("ready\n");
  std::fflush(stdout);
  std::string line = ReadStdinLine();
  if (!absl::StartsWith(line, "addresses ")) return 2;
  std::vector<std::string> addresses;
  for (absl::string_view hex : absl::StrSplit(line.substr(10), ',')) {
    absl::StatusOr<std::string> address = HexDecode(hex);
    if (!address.ok()) return 2;
    addresses.push_back(*std::move(address));
  }
  absl::StatusOr<std::unique_ptr<HostCommunicator>> comm =
      HostCommunicator::Create(worker, rank, addresses, {.timeout = absl::Seconds(20)});
  if (!comm.ok()) {
    std::printf("failed %s\n", comm.status().ToString().c_str());
    std::fflush(stdout);
    return 3;
  }
  std::printf("joined\n");
  std::fflush(stdout);
  if (await_go && ReadStdinLine() != "go") return 0;
  for (const std::string& failure : RunCollectiveChecks(**comm)) {
    std::printf("check %s\n", failure.c_str());
  }
  std::printf("checks done\n");
  std::fflush(stdout);
  while (!StdinClosed(1000)) {
  }
  return 0;
}

int RunOwner(UcxWorker& worker, const std::string& sizes) {
  std::vector<std::vector<std::byte>> objects;
  ObjectRegistry registry;
  for (absl::string_view s : absl::StrSplit(sizes, ',', absl::SkipEmpty())) {
    size_t size = 0;
    if (!absl::SimpleAtoi(s, &size)) return 2;
    objects.push_back(Pattern(size));
    std::string id = PatternId(size);
    if (!registry.Add(id, objects.back()).ok()) return 2;
    std::printf("object %s %llu\n", id.c_str(),
                static_cast<unsigned long long>(Checksum(objects.back())));
  }
  absl::StatusOr<std::unique_ptr<ObjectServer>> server =
      ObjectServer::Start(worker, registry.AsLookup());
  if (!server.ok()) return 3;
  std::printf("ready\n");
  std::fflush(stdout);
  while (!StdinClosed(1000)) {
  }
  server->reset();
  for (const auto& object : objects) (void)registry.Remove(PatternId(object.size()));
  return 0;
}

int RunFetcher(UcxWorker& worker, const std::string& owner_hex, const std::string& id,
               int count) {
  absl::StatusOr<std::string> address = HexDecode(owner_hex);
  if (!address.ok()) return 2;
  absl::StatusOr<PeerId> owner = worker.Connect(*address, "owner");
  absl::StatusOr<std::unique_ptr<ObjectFetcher>> fetcher = ObjectFetcher::Create(worker);
  if (!owner.ok() || !fetcher.ok()) return 3;
  std::printf("ready\n");
  std::fflush(stdout);
  for (int i = 0; count == 0 || i < count; ++i) {
    absl::StatusOr<FetchedObject> object = (*fetcher)->Fetch(*owner, id);
    if (object.ok()) {
      std::printf("fetched %zu %llu\n", object->size,
                  static_cast<unsigned long long>(Checksum(object->bytes())));
    } else {
      std::printf("failed %s\n", std::string(object.status().message()).c_str());
    }
    std::fflush(stdout);
  }
  while (!StdinClosed(1000)) {
  }
  return 0;
}

int Main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::map<std::string, std::string> flags;
  for (int i = 2; i < argc; ++i) {
    std::vector<std::string> kv = absl::StrSplit(argv[i], absl::MaxSplits('=', 1));
    if (kv.size() != 2 || !absl::StartsWith(kv[0], "--")) return 2;
    flags[kv[0].substr(2)] = kv[1];
  }
  UcxOptions options;
  if (flags.count("transports")) options.transports = flags["transports"];
  options.detect_peer_failure = options.transports != "shm";  // see UcxOptions
  options.name = flags.count("name") ? flags["name"] : argv[1];
  absl::StatusOr<std::unique_ptr<UcxWorker>> worker = UcxWorker::Create(options);
  if (!worker.ok()) {
    std::fprintf(stderr, "%s\n", std::string(worker.status().message()).c_str());
    return 3;
  }
  std::printf("address %s\n", HexEncode((*worker)->address()).c_str());
  std::string mode = argv[1];
  if (mode == "owner") return RunOwner(**worker, flags["sizes"]);
  int count = 0;
  if (flags.count("count") && !absl::SimpleAtoi(flags["count"], &count)) return 2;
  if (mode == "fetcher") return RunFetcher(**worker, flags["owner"], flags["id"], count);
  int rank = 0;
  if (mode == "rank" && absl::SimpleAtoi(flags["rank"], &rank)) {
    return RunRank(**worker, rank, flags["await_go"] == "1");
  }
  return 2;
}

}  // namespace
}  // namespace gpupool::transport::testing

int main(int argc, char** argv) { return gpupool::transport::testing::Main(argc, argv); }
