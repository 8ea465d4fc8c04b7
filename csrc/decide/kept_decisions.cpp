#include "decide/kept_decisions.h"

#include "base/python_bridge.h"
#include "decide/flag_state.h"
#include "decide/job_sharing.h"
#include "decide/plan.h"
#include "decide/tuner/fastest_tuner.h"
#include "run/direct_runner.h"
#include "run/engine_name.h"
#include "run/graph_runner.h"
#include "run/graph_runner_source.h"
#include "store/serialized_execution_plan.h"
#include "store/tuning_db.h"

#include <cudnn.h>
#include <cudnn_frontend/thirdparty/nlohmann/json.hpp>
#include <cudnn_frontend_version.h>
#include <torch/headeronly/version.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <unordered_map>

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

std::atomic<int64_t> g_kept{0}, g_tuned{0}, g_waited{0}, g_borrowed{0}, g_adopted{0}, g_shared{0};

ConvKey decision_problem(ConvKey key) {
  key.algo = kNoChoice;
  key.device = 0;  // any device of the same model decides the same
  return key;
}

bool is_borrowed(const Json& header) { return header.is_object() && header.contains("borrowed_from"); }

// The decision `entry` holds for key, its pick's runner rebuilt from the
// entry's execution plan; nullopt when it cannot serve here (not one of ours,
// its plan refused here), or is borrowed and `accept_borrowed` is false.
std::optional<std::pair<std::shared_ptr<const Choice>, Json>> decision_from_entry(const ConvKey& key,
                                                                                  const DbEntry& entry,
                                                                                  bool accept_borrowed) {
  Json header = Json::parse(entry.header, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object() || !header.contains("pick")) return std::nullopt;  // not one of ours
  if (is_borrowed(header) && !accept_borrowed) return std::nullopt;
  const Json& pick = header["pick"];
  if (pick.is_null()) return std::make_pair(std::shared_ptr<const Choice>(), std::move(header));  // stock's path
  if (!pick.is_string() || pick.get<std::string>().empty()) return std::nullopt;
  auto choice = std::make_shared<Choice>();
  if (pick.get<std::string>() == kDirectKernelName) {  // ours: nothing built, nothing kept but the name
    choice->kernel = kDirectKernelName;
    return std::make_pair(std::shared_ptr<const Choice>(std::move(choice)), std::move(header));
  }
  choice->engine = parse_engine_name(pick.get<std::string>());
  if (!entry.blob.empty()) {
    ConvKey problem = key;
    problem.algo = kNoChoice;
    const auto runner = get_graph_runner_from_bytes(problem, *choice->engine, entry.blob);
    if (!runner->refusal.empty()) return std::nullopt;  // cannot run here after all: tune again
  }
  return std::make_pair(std::shared_ptr<const Choice>(std::move(choice)), std::move(header));
}

// Keeps a tuning's decision, with its pick's execution plan as built here;
// returns the entry kept.
DbEntry keep_decision(const ConvKey& key, const std::shared_ptr<const Choice>& choice, const std::string& log_entry) {
  Json header = Json::parse(log_entry, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) header = Json::object();
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
    const auto runner = get_graph_runner(problem, *choice->engine, &created, plan_execution_plans());
    SerializedBytes bytes = serialize_execution_plan(*runner);
    if (bytes.why_not.empty()) entry.blob = std::move(bytes.data);
  }
  db_save(DbKind::kDecision, entry);
  return entry;
}

std::string kept_entry(Json header) {
  header["kept"] = true;
  return header.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Borrowed decisions. A workload whose shapes change (a detector's image
// sizes, audio lengths) meets each layer at tens of sizes, and tuning each one
// builds every candidate's execution plan, where stock builds one: on such a
// run the builds, not the timing, are what tuning costs. So on the fly
// "fastest" takes the decision this process tuned (or took from the database)
// for the same convolution at a nearby size: every size, and the input's
// element count, within a factor of kBorrowRange. Its pick is built for the
// new size (one build, as stock's) and must run it; the decision is kept
// marked as borrowed, loaded like any by later processes, and never counts as
// tuned: tune() tunes the configuration. The range keeps a pick's float64
// check meaningful (reductions at most that much longer) and keeps the sizes
// of one layer apart from a pyramid's levels, which differ by 2x exactly.
constexpr double kBorrowRange = 2.0;

// A tuned decision others may borrow.
struct Anchor {
  ConvKey problem;                       // the tuned configuration (decision_problem)
  std::shared_ptr<const Choice> choice;  // nullptr: the stock path
};

std::mutex g_anchor_mutex;

std::unordered_map<std::string, std::vector<Anchor>>& anchors() {
  static auto* map = new std::unordered_map<std::string, std::vector<Anchor>>();  // leaked, as profiling's
  return *map;
}

// The decision key with the batch and spatial sizes left out: what borrowing
// decisions must share.
std::string family_key(const ConvKey& key) {
  ConvKey family = key;
  family.input_sizes[0] = 0;
  for (int d = 2; d < key.dim; ++d) family.input_sizes[d] = 0;
  family.output_sizes.fill(0);
  return decision_key(family);
}

void add_anchor(const ConvKey& key, std::shared_ptr<const Choice> choice) {
  Anchor anchor{decision_problem(key), std::move(choice)};
  const std::lock_guard<std::mutex> lock(g_anchor_mutex);
  anchors()[family_key(key)].push_back(std::move(anchor));
}

// How far apart two configurations of one family are (the sum of the logs of
// the size ratios), or nullopt beyond kBorrowRange.
std::optional<double> distance(const ConvKey& key, const std::array<int64_t, kMaxDims>& sizes) {
  double total = 0, elements = 0;
  for (int d = 0; d < key.dim; ++d) {
    if (d == 1) continue;  // channels: part of the family
    const double ratio = std::log(static_cast<double>(key.input_sizes[d]) / static_cast<double>(sizes[d]));
    if (std::abs(ratio) >= std::log(kBorrowRange)) return std::nullopt;
    total += std::abs(ratio);
    elements += ratio;
  }
  if (std::abs(elements) >= std::log(kBorrowRange)) return std::nullopt;
  return total;
}

std::optional<Anchor> nearest_anchor(const ConvKey& key) {
  const std::string family = family_key(key);
  const std::lock_guard<std::mutex> lock(g_anchor_mutex);
  const auto it = anchors().find(family);
  if (it == anchors().end()) return std::nullopt;
  const Anchor* best = nullptr;
  double best_distance = 0;
  for (const Anchor& anchor : it->second) {
    const auto d = distance(key, anchor.problem.input_sizes);
    if (d && (best == nullptr || *d < best_distance)) {
      best = &anchor;
      best_distance = *d;
    }
  }
  return best ? std::optional<Anchor>(*best) : std::nullopt;
}

// A nearby size's decision, when its pick runs key's problem (its runner is
// built here); the record to keep as the decision's tuning-log fields.
std::optional<std::pair<std::shared_ptr<const Choice>, Json>> borrow_decision(const ConvKey& key) {
  if (env_int("TORCH_CUDNN_ALGO_FASTEST_BORROW", 1) <= 0) return std::nullopt;
  auto anchor = nearest_anchor(key);
  if (!anchor) return std::nullopt;
  Json record;
  record["pick"] = nullptr;
  record["borrowed_from"] = Json::parse(json_request(anchor->problem));
  const std::shared_ptr<const Choice>& choice = anchor->choice;
  if (choice) {
    ConvKey problem = key;
    problem.algo = kNoChoice;
    bool created = false;
    const auto runner = choice->is_kernel() ? get_direct_runner(problem, &created)
                                            : get_graph_runner(problem, *choice->engine, &created,
                                                               plan_execution_plans());
    if (!runner->refusal.empty()) return std::nullopt;  // it cannot run this size: tune it
    // The tuner kept its candidates within conv_workspace_limit; a pick may need more at a larger size.
    if (!fits_workspace_limit(runner->workspace_bytes)) return std::nullopt;
    record["pick"] = choice->is_kernel() ? choice->kernel : choice->engine->canonical;
  }
  return std::make_pair(choice, std::move(record));
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

namespace {

// A decision of this process and the database entry that keeps it.
struct Decided {
  std::shared_ptr<const Choice> choice;  // nullptr: the stock path
  DbEntry kept;
};

// The decision of this process alone (decide_fastest without a job); `db_key`
// is decision_key(key), built once per decision.
Decided decide_here(const ConvKey& key, const std::string& db_key, bool retune, std::string* entry, bool borrow) {
  const auto take_kept = [&]() -> std::optional<Decided> {
    if (retune) return std::nullopt;
    auto stored = db_load(DbKind::kDecision, db_key);
    if (!stored) return std::nullopt;
    auto kept = decision_from_entry(key, *stored, /*accept_borrowed=*/borrow);
    if (!kept) return std::nullopt;
    g_kept.fetch_add(1, std::memory_order_relaxed);
    if (!is_borrowed(kept->second)) add_anchor(key, kept->first);
    if (entry != nullptr) *entry = kept_entry(std::move(kept->second));
    return Decided{std::move(kept->first), std::move(*stored)};
  };
  if (auto kept = take_kept()) return std::move(*kept);
  if (borrow && !retune) {
    if (auto borrowed = borrow_decision(key)) {
      g_borrowed.fetch_add(1, std::memory_order_relaxed);
      const std::string record = borrowed->second.dump(-1, ' ', false, Json::error_handler_t::replace);
      DbEntry kept = keep_decision(key, borrowed->first, record);
      if (entry != nullptr) *entry = record;
      return Decided{std::move(borrowed->first), std::move(kept)};
    }
  }
  std::optional<DbClaim> claim;
  {
    const WithoutGil unlocked;  // another process's tuning may take seconds
    claim.emplace(DbKind::kDecision, db_key, kClaimWait);
  }
  if (claim->waited()) g_waited.fetch_add(1, std::memory_order_relaxed);
  // Another process of the node may have decided it since the first look,
  // while this one waited for the claim or just before it asked.
  if (auto kept = take_kept()) return std::move(*kept);
  std::string log_entry;
  auto choice = tune_fastest(key, &log_entry);
  g_tuned.fetch_add(1, std::memory_order_relaxed);
  add_anchor(key, choice);
  DbEntry kept = keep_decision(key, choice, log_entry);
  if (entry != nullptr) *entry = std::move(log_entry);
  return Decided{std::move(choice), std::move(kept)};
}

// Runs the decision another rank of the job made, keeping it in this rank's
// database; nullopt when it cannot serve here (then this rank decides alone).
std::optional<std::shared_ptr<const Choice>> adopt(const ConvKey& key, const DbEntry& decision,
                                                   std::string* entry) {
  std::optional<std::pair<std::shared_ptr<const Choice>, Json>> taken;
  try {
    taken = decision_from_entry(key, decision, /*accept_borrowed=*/true);
  } catch (const c10::Error&) {  // a pick this build cannot parse
  }
  if (!taken) {
    warn_to_python("torch_cudnn_algo: the decision another rank of the job made cannot run here; this rank "
                   "decides alone: " + describe_conv(key));
    return std::nullopt;
  }
  db_save(DbKind::kDecision, decision);
  g_adopted.fetch_add(1, std::memory_order_relaxed);
  if (!is_borrowed(taken->second)) add_anchor(key, taken->first);
  if (entry != nullptr) {
    taken->second["adopted"] = true;
    *entry = kept_entry(std::move(taken->second));
  }
  return std::move(taken->first);
}

}  // namespace

std::shared_ptr<const Choice> decide_fastest(const ConvKey& key, bool retune, std::string* entry, bool borrow) {
  const JobScope scope = retune ? JobScope::kRetune : borrow ? JobScope::kOnTheFly : JobScope::kTune;
  const std::string shared_key = decision_key(key);
  const JobTurn turn = job_turn(scope, shared_key);
  if (turn.role == JobTurn::Role::kAdopt) {
    if (auto adopted = adopt(key, turn.decision, entry)) return *adopted;
  }
  if (turn.role != JobTurn::Role::kDecide) return decide_here(key, shared_key, retune, entry, borrow).choice;
  Decided mine;
  try {
    mine = decide_here(key, shared_key, retune, entry, borrow);
  } catch (...) {
    job_abandon(scope, shared_key);
    throw;
  }
  const auto job = job_publish(scope, mine.kept);
  if (job) g_shared.fetch_add(1, std::memory_order_relaxed);
  if (job && (job->header != mine.kept.header || job->blob != mine.kept.blob)) {
    // Another rank stopped waiting for this one and published first: every rank runs that one.
    if (auto adopted = adopt(key, *job, entry)) return *adopted;
  }
  return mine.choice;
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
    // A tuned decision beats a borrowed one; else the faster as each measured it, else the newer.
    const Json their_ms = field(theirs, "pick_ms"), our_ms = field(ours, "pick_ms");
    const bool tuned_side = is_borrowed(theirs) != is_borrowed(ours);
    const bool timed = !tuned_side && their_ms.is_number() && our_ms.is_number();
    const bool theirs_win = tuned_side ? is_borrowed(ours)
                            : timed    ? their_ms.get<double>() < our_ms.get<double>()
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
    conflict["by"] = tuned_side ? "tuned" : timed ? "faster" : "newer";
    report.conflicts.push_back(conflict.dump(-1, ' ', false, Json::error_handler_t::replace));
  }
  return report;
}

bool has_kept_decision(const ConvKey& key) {
  const auto entry = db_load(DbKind::kDecision, decision_key(key));
  return entry && !is_borrowed(Json::parse(entry->header, nullptr, /*allow_exceptions=*/false));
}

KeptDecisionCounts kept_decision_counts() {
  return {g_kept.load(std::memory_order_relaxed),    g_tuned.load(std::memory_order_relaxed),
          g_waited.load(std::memory_order_relaxed),  g_borrowed.load(std::memory_order_relaxed),
          g_adopted.load(std::memory_order_relaxed), g_shared.load(std::memory_order_relaxed)};
}

void clear_borrow_anchors() {
  const std::lock_guard<std::mutex> lock(g_anchor_mutex);
  anchors().clear();
}

}  // namespace torch_cudnn_algo
