// File: runtime/service/head_auth.h
//
// Who may talk to the head: a job presents its team's token (PoolServerOptions::team_tokens),
// a node agent the agents' token (PoolServerOptions::agent_token). Tokens are compared in time
// that does not depend on how much of a guess was right. Internal to the service's RPC server.
//
//   HeadAuth auth(options.team_tokens, options.agent_token);
//   absl::Status st = auth.Authenticate("vision", token);   // Unauthenticated when refused
//
// Constant after construction, so thread-safe.
#ifndef GPUPOOL_RUNTIME_SERVICE_HEAD_AUTH_H_
#define GPUPOOL_RUNTIME_SERVICE_HEAD_AUTH_H_

#include <map>
#include <string>

#include "absl/status/status.h"

namespace gpupool::runtime {

class HeadAuth {
 public:
  HeadAuth(std::map<std::string, std::string> team_tokens, std::string agent_token)
      : team_tokens_(std::move(team_tokens)), agent_token_(std::move(agent_token)) {}

  // Whether `token` is team `team`'s; Unauthenticated for an unknown team or a wrong token.
  absl::Status Authenticate(const std::string& team, const std::string& token) const;
  // Whether `token` is the agents'; Unauthenticated when wrong, or when the pool takes no agents.
  absl::Status AuthenticateAgent(const std::string& token) const;
  // Whether `token` is any team's or the agents' (what the read-only reports ask for).
  bool Known(const std::string& token) const;

 private:
  const std::map<std::string, std::string> team_tokens_;  // team -> token
  const std::string agent_token_;                          // empty: agents are refused
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_HEAD_AUTH_H_
