// File: runtime/tasks/submits_to_driver.cc
#include "runtime/tasks/submits_to_driver.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gpupool::runtime {

absl::StatusOr<uint64_t> SubmitsToDriver::Submit(wire::Submit message) {
  Waiting waiting;
  {
    MutexLock lock(&mu_);
    if (!stopped_.ok()) return stopped_;
    message.request = ++last_request_;
    waiting_[message.request] = &waiting;
  }
  const uint64_t request = message.request;
  // A send that fails for the connection's sake ends it (the serving thread then Stops this); one
  // that fails for the frame's (over the limit) leaves it: either way no answer comes.
  if (absl::Status sent = driver_->Send(wire::Encode(message)); !sent.ok()) {
    MutexLock lock(&mu_);
    waiting_.erase(request);
    return absl::Status(sent.code(), absl::StrCat("it could not be sent to the driver: ", sent.message()));
  }
  MutexLock lock(&mu_);
  while (!waiting.answered && stopped_.ok()) cv_.Wait(&mu_);
  waiting_.erase(request);
  if (!waiting.answered) return stopped_;
  if (waiting.answer.object == 0) {
    const auto code = waiting.answer.code != 0 ? static_cast<absl::StatusCode>(waiting.answer.code)
                                               : absl::StatusCode::kInternal;
    return absl::Status(code, absl::StrCat("the driver refused the task: ", waiting.answer.message));
  }
  return waiting.answer.object;
}

void SubmitsToDriver::OnSubmitted(const wire::Submitted& answer) {
  {
    MutexLock lock(&mu_);
    auto it = waiting_.find(answer.request);
    if (it == waiting_.end()) return;  // its submitter gave up (Stop)
    it->second->answered = true;
    it->second->answer = answer;
  }
  cv_.NotifyAll();
}

void SubmitsToDriver::Stop(const absl::Status& why) {
  {
    MutexLock lock(&mu_);
    stopped_ = why.ok() ? absl::CancelledError("the worker is stopping") : why;
  }
  cv_.NotifyAll();
}

}  // namespace gpupool::runtime
