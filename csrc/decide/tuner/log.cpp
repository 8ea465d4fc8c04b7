// The tuning log: one JSON object per decision (see tuning_log_entries),
// written with the JSON library the cuDNN frontend vendors, and the debug line
// each decision logs.
#include "decide/tuner/fastest_tuner.h"
#include "decide/tuner/tuner.h"

#include "base/python_bridge.h"

#include <cudnn_frontend/thirdparty/nlohmann/json.hpp>

#include <cmath>
#include <mutex>
#include <sstream>

namespace torch_cudnn_algo {
namespace tuner {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written

std::mutex g_log_mutex;

std::vector<std::string>& log_entries() {
  static auto* entries = new std::vector<std::string>();  // leaked, like the caches
  return *entries;
}

// `value` with 6 significant digits, as the log line shows it; "null" when not finite.
std::string six_digits(double value) {
  if (!std::isfinite(value)) return "null";
  std::ostringstream out;
  out.precision(6);
  out << value;
  return out.str();
}

// `value` as a JSON number of 6 significant digits (an integer when that is
// how it prints), or null when not finite.
Json json_number(double value) {
  const std::string text = six_digits(value);
  if (text == "null") return nullptr;
  if (text.find_first_of(".eEn") == std::string::npos) return std::stoll(text);
  return std::stod(text);
}

// One line of text: the log has one entry per line.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  return text;
}

const char* dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kDouble: return "float64";
    default: return "float32";
  }
}

}  // namespace

void Tuner::record(const Candidate* pick, size_t timed) {
  const Candidate* stock = stock_config_ ? &candidates_[*stock_config_] : nullptr;
  const double seconds = seconds_since(started_);
  Json entry;
  entry["direction"] = direction_name(key_.dir());
  entry["conv"] = one_line(describe_conv(key_));
  entry["dtype"] = dtype_name(key_.scalar_type());
  entry["deterministic"] = key_.deterministic;
  entry["pick"] = pick ? Json(one_line(pick->name())) : Json(nullptr);
  entry["stock_config"] = stock ? Json(one_line(stock->name())) : Json(nullptr);
  entry["pick_ms"] = pick ? json_number(pick->median_ms()) : Json(nullptr);
  entry["stock_config_ms"] = stock ? json_number(stock->median_ms()) : Json(nullptr);
  entry["pick_host_us"] = pick ? json_number(pick->median_host_us()) : Json(nullptr);
  entry["stock_config_host_us"] = stock ? json_number(stock->median_host_us()) : Json(nullptr);
  entry["candidates"] = listed_;
  entry["timed"] = timed;
  entry["knob_configs"] = knob_configs_;
  entry["probed"] = probed_;
  entry["retimed_batches"] = retimed_batches_;
  entry["seconds"] = json_number(seconds);
  entry["workspace"] = pick ? Json(pick->runner->workspace_bytes) : Json(nullptr);
  entry["max_rel_error"] = json_number(pick_error_);
  entry["stock_config_max_rel_error"] = json_number(stock_error_);
  entry["max_rel_error_bound"] = json_number(error_bound_);
  size_t built = 0, built_rtc = 0, listed_rtc = 0, deferred_rtc = 0;
  for (const auto& c : candidates_) {
    built += c.built && !c.cached;
    built_rtc += c.built && !c.cached && c.rtc;
    listed_rtc += c.rank >= 0 && c.rtc;
    deferred_rtc += c.deferred;
  }
  entry["prepared_ahead"] = prepared_ahead_;
  entry["built"] = built;
  entry["built_rtc"] = built_rtc;
  entry["listed_rtc"] = listed_rtc;
  entry["deferred_rtc"] = deferred_rtc;
  Json time_s;
  time_s["heuristics"] = json_number(spent_.heuristics_s);
  time_s["build"] = json_number(spent_.build_s);
  time_s["build_sum"] = json_number(spent_.build_sum_s);
  time_s["wait"] = json_number(spent_.wait_s);
  time_s["operands"] = json_number(spent_.operands_s);
  time_s["warmup"] = json_number(spent_.warmup_s);
  time_s["timing"] = json_number(spent_.timing_s);
  time_s["accuracy"] = json_number(spent_.accuracy_s);
  time_s["knob_search"] = json_number(spent_.knob_s);
  entry["time_s"] = std::move(time_s);
  // Per configuration considered (knob-search ones included): the heuristics'
  // rank (-1: knob search), RUNTIME_COMPILATION, its build seconds (null: not
  // built), whether the runner cache already held it, host ms of its first run,
  // median GPU ms and host µs per enqueue (null: not timed).
  Json configs = Json::array();
  for (const auto& c : candidates_) {
    Json config;
    config["config"] = one_line(c.name());
    config["rank"] = c.rank;
    config["source"] = c.source;
    config["extra"] = c.extra;
    config["probe"] = c.probe == Candidate::Probe::kNone ? Json(nullptr)
                      : Json(c.probe == Candidate::Probe::kNear ? "near" : "far");
    config["rtc"] = c.rtc;
    config["build_s"] = c.built ? json_number(c.build_s) : Json(nullptr);
    config["cached"] = c.cached;
    config["runnable"] = c.runnable();
    config["warmup_ms"] = json_number(c.warmup_ms);
    config["ms"] = c.samples_ms.empty() ? Json(nullptr) : json_number(c.median_ms());
    config["host_us"] = c.host_us.empty() ? Json(nullptr) : json_number(c.median_host_us());
    configs.push_back(std::move(config));
  }
  entry["configs"] = std::move(configs);
  log_entry_ = entry.dump(-1, ' ', false, Json::error_handler_t::replace);
  {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    log_entries().push_back(log_entry_);
  }
  std::ostringstream line;
  line.precision(4);
  line << "fastest: " << (pick ? pick->name() : "stock's own path") << " ("
       << (pick ? six_digits(pick->median_ms()) : "-") << " ms) vs stock's configuration "
       << (stock ? stock->name() + " (" + six_digits(stock->median_ms()) + " ms)" : "none") << "; "
       << listed_ << " candidates, " << timed << " timed, "
       << knob_configs_ << " knob configurations, tuned in " << six_digits(seconds) << " s | "
       << describe_conv(key_);
  log_to_python(LogLevel::kDebug, line.str());
}

}  // namespace tuner

std::vector<std::string> tuning_log_entries() {
  std::lock_guard<std::mutex> lock(tuner::g_log_mutex);
  return tuner::log_entries();
}

void clear_tuning_log() {
  std::lock_guard<std::mutex> lock(tuner::g_log_mutex);
  tuner::log_entries().clear();
}

}  // namespace torch_cudnn_algo
