// File: runtime/cli/command.h
//
// How the `gpupool` command line is put together: each subcommand lives in its own file and adds
// itself to the CLI11 app with a Register...Command function that main() calls. A subcommand's
// callback reports bad input as one line on stderr naming the problem and exits non-zero by
// throwing CommandFailed (main prints it); it never crashes on input.
#ifndef GPUPOOL_RUNTIME_CLI_COMMAND_H_
#define GPUPOOL_RUNTIME_CLI_COMMAND_H_

#include <stdexcept>
#include <string>

#include "CLI/CLI.hpp"

namespace gpupool::cli {

// Thrown by a subcommand to end the program: `message` goes to stderr as "gpupool: message"
// (unless empty: the command already printed what it had to say) and `exit_code` is returned.
class CommandFailed : public std::runtime_error {
 public:
  explicit CommandFailed(const std::string& message, int exit_code = 1)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

void RegisterDemoCommand(CLI::App& app);
void RegisterDevicesCommand(CLI::App& app);
void RegisterHeadCommand(CLI::App& app);  // and `agent`
void RegisterGpuCommands(CLI::App& app);  // `gpu` and `node` (gpu_command.cc)
void RegisterMigCommand(CLI::App& app);
void RegisterSimulateCommand(CLI::App& app);
void RegisterStatusCommands(CLI::App& app);  // `status` and `queue`
void RegisterUsageCommand(CLI::App& app);
void RegisterSavingsCommand(CLI::App& app);
void RegisterVersionCommand(CLI::App& app);

}  // namespace gpupool::cli

#endif  // GPUPOOL_RUNTIME_CLI_COMMAND_H_
