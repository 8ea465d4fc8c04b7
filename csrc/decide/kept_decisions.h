// "fastest" decisions kept in the tuning database (store/tuning_db.h): a
// configuration tuned by any earlier process, rank or node sharing the
// database is not tuned again, and its pick's execution plan comes back
// serialized instead of being built (or compiled). In a distributed job the
// ranks share them (job_sharing.h): one rank decides, every rank runs it.
//
// A decision is valid only under what decided it, all of which is in its
// key: the configuration (determinism and TF32 rules included), the policy,
// conv_workspace_limit, conv_knob_search, the GPU model, cuDNN's and the
// frontend's versions, torch's minor release and the tuner's rules.
#pragma once

#include "base/conv_key.h"
#include "decide/choice.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

// The database key of key's "fastest" decision under the settings in force.
std::string decision_key(const ConvKey& key);

// The decision for key's configuration under "fastest" (key.algo ignored):
// the database's, else with `borrow` the decision of the same convolution at
// a nearby size (see kept_decisions.cpp; TORCH_CUDNN_ALGO_FASTEST_BORROW=0
// turns it off), else tuned here and kept. Without `borrow` a borrowed
// decision in the database is tuned over. Processes of one node meeting the
// configuration at once tune it once: the others wait for that decision (see
// DbClaim). In a distributed job one rank decides and the others adopt its
// decision, keeping it in their databases (job_sharing.h). `retune`: tune even when the database holds a decision. `*entry`,
// if given, receives the tuning-log entry, for a kept decision its recorded
// fields with "kept": true, for a borrowed one "pick" and "borrowed_from".
// nullptr: the stock path. Errors of the tuner propagate; the database's never do.
std::shared_ptr<const Choice> decide_fastest(const ConvKey& key, bool retune, std::string* entry = nullptr,
                                             bool borrow = false);

// What merging another tuning database into this one did (merge_tuning_db).
struct MergeReport {
  int64_t added = 0;     // entries this database lacked
  int64_t replaced = 0;  // decisions of this database that the other's beat
  int64_t kept = 0;      // entries this database already held (the same, or better)
  // Per configuration whose decisions differ, a JSON object: "configuration",
  // "gpu", "here" and "merged" (each's pick, times, when, where), "kept"
  // ("here" or "merged") and "by" ("faster" or "newer").
  std::vector<std::string> conflicts;
};

// Merges the tuning database in `from_dir` into this process's: entries this
// one lacks are added; where both hold a decision with different picks (a
// conflict, reported), the faster pick as each measured it wins, the newer
// if either has no time. Execution plans of the same key are the same plan:
// this database's stays. Raises ValueError when `from_dir` is this database.
MergeReport merge_tuning_db(const std::string& from_dir);

// Whether the database holds a tuned (not borrowed) decision for key under the
// settings in force (nothing is built).
bool has_kept_decision(const ConvKey& key);

// Monotonic counts since the process started: decisions taken from the
// database, decisions tuned here, decisions that first waited for another
// process of the node tuning the same configuration, decisions borrowed from a
// nearby size, decisions adopted from another rank of the job, and decisions
// this rank made for the job (published).
struct KeptDecisionCounts {
  int64_t kept = 0;
  int64_t tuned = 0;
  int64_t waited = 0;
  int64_t borrowed = 0;
  int64_t adopted = 0;
  int64_t shared = 0;
};
KeptDecisionCounts kept_decision_counts();

// Forgets the decisions this process may borrow from (clear_cache: the
// process's decisions go, so do their sizes).
void clear_borrow_anchors();

}  // namespace torch_cudnn_algo
