// The `gpupool` command line: one binary, one subcommand per file (see command.h).
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "runtime/cli/command.h"

int main(int argc, char** argv) {
  CLI::App app{"gpupool: one pool of GPUs shared by many teams"};
  app.require_subcommand(1);
  gpupool::cli::RegisterDemoCommand(app);
  gpupool::cli::RegisterDevicesCommand(app);
  gpupool::cli::RegisterHeadCommand(app);
  gpupool::cli::RegisterGpuCommands(app);
  gpupool::cli::RegisterMigCommand(app);
  gpupool::cli::RegisterSimulateCommand(app);
  gpupool::cli::RegisterStatusCommands(app);
  gpupool::cli::RegisterUsageCommand(app);
  gpupool::cli::RegisterSavingsCommand(app);
  gpupool::cli::RegisterVersionCommand(app);
  // CLI11 reports an unknown command as "A subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string command = argv[1];
    std::vector<std::string> known;
    for (const CLI::App* sub : app.get_subcommands({})) known.push_back(sub->get_name());
    if (std::find(known.begin(), known.end(), command) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      std::cerr << "gpupool: unknown command '" << command << "' (commands: " << list << ")\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the problem, never CLI11's multi-line banner.
    std::cerr << "gpupool: " << e.what() << " (see gpupool --help)\n";
    return 2;
  } catch (const gpupool::cli::CommandFailed& e) {
    if (e.what()[0] != '\0') std::cerr << "gpupool: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "gpupool: internal error: " << e.what() << "\n";
    return 70;  // EX_SOFTWARE
  }
  return 0;
}
