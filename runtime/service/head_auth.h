// File: runtime/service/head_auth.h
//
// Who may talk to the head, and what they may see: a job presents its team's token
// (PoolServerOptions::team_tokens), a node agent the agents' token (agent_token), an operator the
// operators' token (operator_token). The read-only views (status, queue, usage, over RPC and
// HTTP alike) ask Identify who holds a token: operators and agents see the whole pool, a team
// sees the pool-wide aggregates and its own team's rows only (DESIGN §6). Tokens are compared in
// time that does not depend on how much of a guess was right. Internal to the service.
//
//   HeadAuth auth(options.team_tokens, options.agent_token, options.operator_token);
//   absl::Status st = auth.Authenticate("vision", token);   // Unauthenticated when refused
//   std::optional<Viewer> who = auth.Identify(token);        // nullopt: no data for this token
//
// Constant after construction, so thread-safe.
#ifndef GPUPOOL_RUNTIME_SERVICE_HEAD_AUTH_H_
#define GPUPOOL_RUNTIME_SERVICE_HEAD_AUTH_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace gpupool::runtime {

// Who reads a view, which decides the rows it holds.
struct Viewer {
  enum class Kind {
    kOperator,  // the operators' token: the whole pool
    kAgents,    // the node agents' token: the whole pool (it is deployed by the operators)
    kTeam,      // a team's token: pool-wide aggregates and that team's rows
  };
  Kind kind = Kind::kOperator;
  std::string team;  // kTeam only

  static Viewer Operator() { return Viewer{Kind::kOperator, ""}; }
  static Viewer Team(std::string name) { return Viewer{Kind::kTeam, std::move(name)}; }
  bool sees_everything() const { return kind != Kind::kTeam; }
  // Whether a row of `row_team` is shown to this viewer.
  bool Sees(const std::string& row_team) const { return sees_everything() || row_team == team; }
};

class HeadAuth {
 public:
  HeadAuth(std::map<std::string, std::string> team_tokens, std::string agent_token,
           std::string operator_token = "")
      : team_tokens_(std::move(team_tokens)),
        agent_token_(std::move(agent_token)),
        operator_token_(std::move(operator_token)) {}

  // Whether `token` is team `team`'s; Unauthenticated for an unknown team or a wrong token.
  absl::Status Authenticate(const std::string& team, const std::string& token) const;
  // Whether `token` is the agents'; Unauthenticated when wrong, or when the pool takes no agents.
  absl::Status AuthenticateAgent(const std::string& token) const;
  // Who holds `token`, for the read-only views; nullopt for a token that is nobody's (the caller
  // answers with no data at all).
  std::optional<Viewer> Identify(const std::string& token) const;

 private:
  const std::map<std::string, std::string> team_tokens_;  // team -> token
  const std::string agent_token_;                          // empty: agents are refused
  const std::string operator_token_;                       // empty: no operators' token
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_HEAD_AUTH_H_
