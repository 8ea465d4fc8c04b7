// The operators of the tuning database (store/tuning_db.h,
// decide/kept_decisions.h): where it is, its entries, merging another one, and
// what the `db` command and tests do with them. No GPU needed.
#include "decide/kept_decisions.h"
#include "ops/op_values.h"
#include "store/tuning_db.h"

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace torch_cudnn_algo {
namespace {

DbKind kind_argument(const std::string& kind) {
  const auto parsed = db_kind_named(kind);
  TORCH_CHECK_VALUE(parsed, "torch_cudnn_algo: no tuning database entry kind '", kind,
                    "'; kinds are 'decision' and 'execution_plan'");
  return *parsed;
}

int64_t tuning_db_max_bytes_op() {
  return tuning_db_max_bytes();
}

// Every whole entry, without blobs, as a JSON array of {"path", "kind", "key",
// "header" (the entry's JSON object), "bytes", "modified_ns"}.
std::string tuning_db_entries_op() {
  Json entries = Json::array();
  for (const auto& file : db_scan(/*with_blobs=*/false)) {
    Json entry;
    entry["path"] = file.path;
    entry["kind"] = db_kind_name(file.kind);
    entry["key"] = file.entry.key;
    entry["header"] = Json::parse(file.entry.header, nullptr, /*allow_exceptions=*/false);
    entry["bytes"] = file.bytes;
    entry["modified_ns"] = file.modified_ns;
    entries.push_back(std::move(entry));
  }
  return dump(entries);
}

bool tuning_db_save_op(const std::string& kind, const std::string& key, const std::string& header,
                       const at::Tensor& blob) {
  const DbKind parsed = kind_argument(kind);
  TORCH_CHECK_VALUE(!key.empty(), "torch_cudnn_algo: a tuning database entry needs a key");
  const Json fields = Json::parse(header, nullptr, /*allow_exceptions=*/false);
  TORCH_CHECK_VALUE(fields.is_object(), "torch_cudnn_algo: a tuning database entry's header must be a JSON object, "
                    "got: ", header.substr(0, 80));
  TORCH_CHECK_VALUE(blob.device().is_cpu() && blob.scalar_type() == at::kByte && blob.dim() == 1,
                    "torch_cudnn_algo: a tuning database entry's blob must be a 1-d uint8 CPU tensor, got ",
                    blob.scalar_type(), " of ", blob.dim(), " dimensions on ", blob.device());
  const at::Tensor bytes = blob.contiguous();
  DbEntry entry{key, header, {}};
  entry.blob.resize(static_cast<size_t>(bytes.numel()));
  if (!entry.blob.empty()) std::memcpy(entry.blob.data(), bytes.data_ptr<uint8_t>(), entry.blob.size());
  return db_save(parsed, entry);
}

std::tuple<bool, std::string, at::Tensor> tuning_db_load_op(const std::string& kind, const std::string& key) {
  auto entry = db_load(kind_argument(kind), key);
  if (!entry) return {false, "", at::empty({0}, at::kByte)};
  at::Tensor blob = at::empty({static_cast<int64_t>(entry->blob.size())}, at::kByte);
  if (!entry->blob.empty()) std::memcpy(blob.data_ptr<uint8_t>(), entry->blob.data(), entry->blob.size());
  return {true, entry->header, blob};
}

int64_t tuning_db_remove_op(const std::vector<std::string>& paths) {
  return db_remove(paths);
}

// Claims `key` on this node (DbClaim), holds the claim `hold_ms`, releases it;
// returns (owned, waited): how a process meeting a configuration another
// process of the node is tuning behaves, without a GPU.
std::tuple<bool, bool> tuning_db_claim_for(const std::string& kind, const std::string& key, int64_t wait_ms,
                                           int64_t hold_ms) {
  const DbKind parsed = kind_argument(kind);
  TORCH_CHECK_VALUE(wait_ms >= 0 && hold_ms >= 0, "torch_cudnn_algo: wait_ms and hold_ms must be >= 0, got ",
                    wait_ms, " and ", hold_ms);
  const DbClaim claim(parsed, key, std::chrono::milliseconds(wait_ms));
  if (claim.owned()) std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  return {claim.owned(), claim.waited()};
}

// Merges another tuning database into this one: {"added", "replaced", "kept",
// "conflicts": [each conflict's JSON object as text]}.
std::string tuning_db_merge_op(const std::string& from_dir) {
  const MergeReport report = merge_tuning_db(from_dir);
  Json out;
  out["added"] = report.added;
  out["replaced"] = report.replaced;
  out["kept"] = report.kept;
  out["conflicts"] = report.conflicts;
  return dump(out);
}

c10::Dict<std::string, int64_t> tuning_db_counts_op() {
  const auto c = db_counts();
  return counts_dict({{"loaded", c.loaded}, {"saved", c.saved}, {"rejected", c.rejected},
                      {"save_failed", c.save_failed}, {"evicted", c.evicted}});
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_cudnn_algo, m) {
  m.def("tuning_db_dir() -> str", &tuning_db_dir);
  m.def("tuning_db_max_bytes() -> int", &tuning_db_max_bytes_op);
  m.def("tuning_db_entries() -> str", &tuning_db_entries_op);
  m.def("tuning_db_save(str kind, str key, str header, Tensor blob) -> bool", &tuning_db_save_op);
  m.def("tuning_db_load(str kind, str key) -> (bool, str, Tensor)", &tuning_db_load_op);
  m.def("tuning_db_remove(str[] paths) -> int", &tuning_db_remove_op);
  m.def("tuning_db_clear() -> int", &db_clear);
  m.def("tuning_db_counts() -> Dict(str, int)", &tuning_db_counts_op);
  m.def("tuning_db_merge(str from_dir) -> str", &tuning_db_merge_op);
  m.def("tuning_db_claim_for(str kind, str key, int wait_ms, int hold_ms) -> (bool, bool)", &tuning_db_claim_for);
}

}  // namespace torch_cudnn_algo
