#include "runtime/cli/time_arg.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace gpupool::cli {

absl::StatusOr<double> ParseTimeArg(const std::string& raw, double now_s) {
  std::string text(absl::StripAsciiWhitespace(raw));
  if (text == "now") return now_s;
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds) && text[0] != '-') return seconds;
  if (text.size() >= 3 && text[0] == '-') {
    double amount = 0;
    const char unit = absl::ascii_tolower(text.back());
    const double per = unit == 's' ? 1 : unit == 'm' ? 60 : unit == 'h' ? 3600 : unit == 'd' ? 86400
                     : unit == 'w' ? 604800 : 0;
    if (per > 0 && absl::SimpleAtod(text.substr(1, text.size() - 2), &amount) && amount >= 0) {
      return now_s - amount * per;
    }
  }
  for (const char* format : {"%Y-%m-%dT%H:%M:%E*S%Ez", "%Y-%m-%dT%H:%M:%E*S", "%Y-%m-%d %H:%M:%E*S",
                             "%Y-%m-%dT%H:%M", "%Y-%m-%d"}) {
    absl::Time t;
    std::string err;
    if (absl::ParseTime(format, text, absl::UTCTimeZone(), &t, &err)) return absl::ToDoubleSeconds(t - absl::UnixEpoch());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot read '", raw, "' as a time: give Unix seconds (1735689600), ISO 8601 (2025-01-01, ",
      "2025-01-01T12:00:00Z), a time relative to now (-7d, -12h, -30m, -90s, -2w) or 'now'"));
}

}  // namespace gpupool::cli
