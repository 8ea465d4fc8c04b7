// "fastest" decisions shared by the ranks of a distributed job: one rank
// decides a configuration, every rank runs that decision. The protocol (who
// claims a configuration, how long the others wait, what a dead rank costs)
// is the Python coordinator's (torch_cudnn_algo/_distributed.py), which talks
// to the process group's store. Here is what a decision asks it and what
// travels: the tuning database's entry of the decision, its header and its
// serialized execution plan, so that a rank adopting it keeps it in its own
// database and builds nothing the deciding rank built.
#pragma once

#include "store/tuning_db.h"

#include <optional>
#include <string>

namespace torch_cudnn_algo {

// Which decisions a call shares (each scope is decided once per job):
// "fastest" on the fly, where a nearby size's decision may serve; tune()'s,
// tuned only; tune(retune=True)'s, tuned again by this call of the job.
enum class JobScope { kOnTheFly, kTune, kRetune };

// What this rank does with a configuration.
struct JobTurn {
  enum class Role {
    kAlone,   // no job to share with: no process group, coordination off, or the coordinator failed
    kDecide,  // this rank decides, then publishes (job_publish) or gives up (job_abandon)
    kAdopt,   // the job's decision is `decision`
  } role = Role::kAlone;
  DbEntry decision;  // kAdopt: the entry as the deciding rank kept it (key: decision_key)
};

// Asks the coordinator about the configuration of `decision_key` (see
// kept_decisions.h). May wait, without the GIL, for another rank's decision.
JobTurn job_turn(JobScope scope, const std::string& decision_key);

// Publishes this rank's decision (its entry's key is the decision key) and
// returns the job's: this one, or one another rank published first (a rank
// that stopped waiting for this one). nullopt when nothing could be published:
// this rank keeps its own.
std::optional<DbEntry> job_publish(JobScope scope, const DbEntry& decision);

// Gives up a configuration this rank was deciding (its tuning raised): the
// waiting ranks decide it instead of waiting out their bound.
void job_abandon(JobScope scope, const std::string& decision_key);

}  // namespace torch_cudnn_algo
