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

bool HeadAuth::Known(const std::string& token) const {
  bool known = AuthenticateAgent(token).ok();
  for (const auto& [team, t] : team_tokens_) known = known || SameToken(token, t);
  return known;
}

}  // namespace gpupool::runtime
