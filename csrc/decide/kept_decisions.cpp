#include "decide/kept_decisions.h"

#include "base/python_bridge.h"
#include "decide/fastest_tuner.h"
#include "decide/pins.h"
#include "decide/plan.h"
#include "run/direct_runner.h"
#include "run/graph_build.h"
#include "run/graph_runner.h"
#include "store/serialized_execution_plan.h"
#include "store/tuning_db.h"

#include <cudnn.h>
#include <cudnn_frontend/thirdparty/nlohmann/json.hpp>
#include <cudnn_frontend_version.h>
#include <torch/headeronly/version.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <sstream>

namespace torch_cudnn_algo {
namespace {

using Json = nlohmann::ordered_json;

// Bumped whenever the tuner's candidates or decision rules change, so that
// decisions made under the old rules are not taken as this tuner's.
constexpr int kTunerRules = 1;
// How long a process waits for another process of its node tuning the same
// configuration: far more than one tuning takes (a few seconds with runtime
// compilation); after it, this process tunes too.
constexpr auto kClaimWait = std::chrono::seconds(120);

std::atomic<int64_t> g_kept{0}, g_tuned{0}, g_waited{0};

ConvKey decision_problem(ConvKey key) {
  key.algo = kNoChoice;
  key.device = 0;  // any device of the same model decides the same
  return key;
}

// The kept decision for key, its pick's runner rebuilt from the kept
// execution plan; nullopt when the database holds none that can serve.
std::optional<std::pair<std::shared_ptr<const Choice>, Json>> load_decision(const ConvKey& key) {
  const auto entry = db_load(DbKind::kDecision, decision_key(key));
  if (!entry) return std::nullopt;
  Json header = Json::parse(entry->header, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object() || !header.contains("pick")) return std::nullopt;  // not one of ours
  const Json& pick = header["pick"];
  if (pick.is_null()) return std::make_pair(std::shared_ptr<const Choice>(), std::move(header));  // stock's path
  if (!pick.is_string() || pick.get<std::string>().empty()) return std::nullopt;
  auto choice = std::make_shared<Choice>();
  if (pick.get<std::string>() == kDirectKernelName) {  // ours: nothing built, nothing kept but the name
    choice->kernel = kDirectKernelName;
    return std::make_pair(std::shared_ptr<const Choice>(std::move(choice)), std::move(header));
  }
  choice->engine = pick.get<std::string>();
  if (!entry->blob.empty()) {
    ConvKey problem = key;
    problem.algo = kNoChoice;
    const auto runner = get_graph_runner_from_bytes(problem, choice->engine, entry->blob);
    if (!runner->refusal.empty()) return std::nullopt;  // cannot run here after all: tune again
  }
  return std::make_pair(std::shared_ptr<const Choice>(std::move(choice)), std::move(header));
}

// Keeps a tuning's decision, with its pick's execution plan as built here.
void keep_decision(const ConvKey& key, const std::shared_ptr<const Choice>& choice, const std::string& log_entry) {
  Json header = Json::parse(log_entry, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return;
  header.erase("configs");  // the candidates' details stay in the tuning log
  header["configuration"] = Json::parse(json_request(decision_problem(key)));
  header["policy"] = "fastest";
  header["gpu"] = gpu_model_name(key.device);
  header["cudnn"] = static_cast<int64_t>(cudnnGetVersion());
  header["cudnn_frontend"] = static_cast<int64_t>(CUDNN_FRONTEND_VERSION);
  header["torch"] = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
  header["saved"] = utc_now_iso();
  header["host"] = host_name();
  DbEntry entry{decision_key(key), header.dump(-1, ' ', false, Json::error_handler_t::replace), {}};
  if (choice && choice->is_engine()) {
    ConvKey problem = key;
    problem.algo = kNoChoice;
    bool created = false;
    const auto runner = get_graph_runner(problem, choice->engine, &created, plan_execution_plans());
    SerializedBytes bytes = serialize_execution_plan(*runner);
    if (bytes.why_not.empty()) entry.blob = std::move(bytes.data);
  }
  db_save(DbKind::kDecision, entry);
}

std::string kept_entry(Json header) {
  header["kept"] = true;
  return header.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

std::string decision_key(const ConvKey& key) {
  std::ostringstream text;
  text << "torch_cudnn_algo decision; tuner rules " << kTunerRules << "; policy fastest; workspace limit "
       << workspace_limit() << "; knob search " << (knob_search_enabled() ? 1 : 0) << "; GPU "
       << gpu_model_name(key.device) << "; cuDNN " << cudnnGetVersion() << "; frontend " << CUDNN_FRONTEND_VERSION
       << "; torch " << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR << "; "
       << json_request(decision_problem(key));
  return text.str();
}

std::shared_ptr<const Choice> decide_fastest(const ConvKey& key, bool retune, std::string* entry) {
  const auto take_kept = [&]() -> std::optional<std::shared_ptr<const Choice>> {
    if (retune) return std::nullopt;
    auto kept = load_decision(key);
    if (!kept) return std::nullopt;
    g_kept.fetch_add(1, std::memory_order_relaxed);
    if (entry != nullptr) *entry = kept_entry(std::move(kept->second));
    return std::move(kept->first);
  };
  if (auto kept = take_kept()) return *kept;
  std::optional<DbClaim> claim;
  {
    const WithoutGil unlocked;  // another process's tuning may take seconds
    claim.emplace(DbKind::kDecision, decision_key(key), kClaimWait);
  }
  if (claim->waited()) g_waited.fetch_add(1, std::memory_order_relaxed);
  // Another process of the node may have decided it since the first look,
  // while this one waited for the claim or just before it asked.
  if (auto kept = take_kept()) return *kept;
  std::string log_entry;
  auto choice = tune_fastest(key, &log_entry);
  g_tuned.fetch_add(1, std::memory_order_relaxed);
  keep_decision(key, choice, log_entry);
  if (entry != nullptr) *entry = std::move(log_entry);
  return choice;
}

MergeReport merge_tuning_db(const std::string& from_dir) {
  const std::string here = tuning_db_dir();
  TORCH_CHECK_VALUE(!here.empty(), "torch_cudnn_algo: the tuning database is off (TORCH_CUDNN_ALGO_DB=0): "
                    "nothing to merge into");
  std::error_code error;
  TORCH_CHECK_VALUE(std::filesystem::is_directory(from_dir, error), "torch_cudnn_algo: '", from_dir,
                    "' is not a directory; give the directory of another tuning database");
  TORCH_CHECK_VALUE(!std::filesystem::equivalent(from_dir, here, error),
                    "torch_cudnn_algo: '", from_dir, "' is this process's tuning database itself");
  MergeReport report;
  for (auto& incoming : db_scan(/*with_blobs=*/true, from_dir)) {
    auto local = db_load(incoming.kind, incoming.entry.key);
    if (!local) {
      report.added += db_save(incoming.kind, incoming.entry) ? 1 : 0;
      continue;
    }
    if (incoming.kind != DbKind::kDecision) {
      ++report.kept;
      continue;
    }
    const Json theirs = Json::parse(incoming.entry.header, nullptr, false);
    const Json ours = Json::parse(local->header, nullptr, false);
    const auto field = [](const Json& header, const char* name) {
      return header.is_object() && header.contains(name) ? header[name] : Json();
    };
    if (field(theirs, "pick") == field(ours, "pick")) {
      ++report.kept;
      continue;
    }
    const Json their_ms = field(theirs, "pick_ms"), our_ms = field(ours, "pick_ms");
    const bool timed = their_ms.is_number() && our_ms.is_number();
    const bool theirs_win = timed ? their_ms.get<double>() < our_ms.get<double>()
                                  : field(theirs, "saved").dump() > field(ours, "saved").dump();
    if (theirs_win && db_save(DbKind::kDecision, incoming.entry)) {
      ++report.replaced;
    } else {
      ++report.kept;
    }
    Json conflict;
    conflict["configuration"] = field(ours, "configuration");
    conflict["gpu"] = field(ours, "gpu");
    for (const auto& [side, header] : {std::pair<const char*, const Json*>{"here", &ours}, {"merged", &theirs}}) {
      Json about;
      for (const char* name : {"pick", "pick_ms", "stock_config_ms", "saved", "host"}) about[name] = field(*header, name);
      conflict[side] = std::move(about);
    }
    conflict["kept"] = theirs_win ? "merged" : "here";
    conflict["by"] = timed ? "faster" : "newer";
    report.conflicts.push_back(conflict.dump(-1, ' ', false, Json::error_handler_t::replace));
  }
  return report;
}

bool has_kept_decision(const ConvKey& key) {
  return db_load(DbKind::kDecision, decision_key(key)).has_value();
}

KeptDecisionCounts kept_decision_counts() {
  return {g_kept.load(std::memory_order_relaxed), g_tuned.load(std::memory_order_relaxed),
          g_waited.load(std::memory_order_relaxed)};
}

}  // namespace torch_cudnn_algo
