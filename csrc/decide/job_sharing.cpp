#include "decide/job_sharing.h"

#include "base/python_bridge.h"

#include <cstring>

namespace torch_cudnn_algo {
namespace {

// A decision travels as its header (one line of JSON, which escapes every
// newline) and '\n', then its execution plan's bytes. The process group's
// store caps a value (TCPStore: 8 MiB); a plan larger than this travels
// without its bytes, and each adopting rank builds it.
constexpr size_t kMaxSharedPlanBytes = size_t{4} << 20;

std::string encode(const DbEntry& decision) {
  std::string payload = decision.header;
  payload.push_back('\n');
  if (decision.blob.size() <= kMaxSharedPlanBytes) {
    payload.append(reinterpret_cast<const char*>(decision.blob.data()), decision.blob.size());
  }
  return payload;
}

std::optional<DbEntry> decode(const std::string& key, const std::string& payload) {
  const size_t end = payload.find('\n');
  if (end == std::string::npos || end == 0 || payload.front() != '{') {
    warn_to_python("torch_cudnn_algo: a decision another rank published could not be read; this rank decides "
                   "the configuration alone");
    return std::nullopt;
  }
  DbEntry entry{key, payload.substr(0, end), {}};
  entry.blob.resize(payload.size() - end - 1);
  if (!entry.blob.empty()) std::memcpy(entry.blob.data(), payload.data() + end + 1, entry.blob.size());
  return entry;
}

const char* scope_name(JobScope scope) {
  switch (scope) {
    case JobScope::kOnTheFly: return "fly";
    case JobScope::kTune: return "tune";
    case JobScope::kRetune: return "retune";
  }
  return "fly";
}

}  // namespace

JobTurn job_turn(JobScope scope, const std::string& decision_key) {
  const auto answer = call_python_coordinator("turn", scope_name(scope), decision_key, nullptr);
  if (!answer) return {};
  using Kind = CoordinatorAnswer::Kind;
  if (answer->kind == Kind::kText && answer->value == "decide") return {JobTurn::Role::kDecide, {}};
  if (answer->kind == Kind::kBytes) {
    if (auto entry = decode(decision_key, answer->value)) return {JobTurn::Role::kAdopt, std::move(*entry)};
  }
  return {};
}

std::optional<DbEntry> job_publish(JobScope scope, const DbEntry& decision) {
  const std::string payload = encode(decision);
  const auto answer = call_python_coordinator("publish", scope_name(scope), decision.key, &payload);
  if (!answer || answer->kind != CoordinatorAnswer::Kind::kBytes) return std::nullopt;
  if (answer->value == payload) return decision;
  return decode(decision.key, answer->value);
}

void job_abandon(JobScope scope, const std::string& decision_key) {
  call_python_coordinator("abandon", scope_name(scope), decision_key, nullptr);
}

}  // namespace torch_cudnn_algo
