#include "runtime/service/head_auth.h"

#include "absl/strings/str_cat.h"

namespace gpupool::runtime {
namespace {

bool SameToken(const std::string& a, const std::string& b) {
  // Compares every byte, so the time taken does not tell how much of a guess was right.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) diff |= static_cast<unsigned char>(a[i % (a.size() + 1)] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::Status HeadAuth::Authenticate(const std::string& team, const std::string& token) const {
  auto it = team_tokens_.find(team);
  if (it == team_tokens_.end()) {
    return absl::UnauthenticatedError(absl::StrCat("team '", team, "' is not known to this pool"));
  }
  if (!SameToken(token, it->second)) {
    return absl::UnauthenticatedError(absl::StrCat("wrong token for team '", team, "'"));
  }
  return absl::OkStatus();
}

absl::Status HeadAuth::AuthenticateAgent(const std::string& token) const {
  if (agent_token_.empty()) return absl::UnauthenticatedError("this pool accepts no node agents");
  if (!SameToken(token, agent_token_)) return absl::UnauthenticatedError("wrong agent token");
  return absl::OkStatus();
}

std::optional<Viewer> HeadAuth::Identify(const std::string& token) const {
  if (token.empty()) return std::nullopt;
  // Every comparison is made whatever matched, so the time taken does not say which kind matched.
  std::optional<Viewer> who;
  if (!operator_token_.empty() && SameToken(token, operator_token_)) who = Viewer::Operator();
  if (AuthenticateAgent(token).ok()) who = Viewer{Viewer::Kind::kAgents, ""};
  for (const auto& [team, t] : team_tokens_) {
    if (SameToken(token, t) && !who.has_value()) who = Viewer::Team(team);
  }
  return who;
}

}  // namespace gpupool::runtime
