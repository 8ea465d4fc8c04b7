// The tuning database: what tuning learnt, kept on disk for every later
// process, rank and node that shares the directory.
//
// One file per entry, named by a hash of its key (the text of everything that
// makes the entry valid elsewhere: configuration, GPU model, cuDNN and
// frontend versions, ...). A file holds the key in full (a hash collision is
// caught), a JSON header (what a listing shows) and an optional blob (a
// serialized execution plan), under one checksum. Files are written aside and
// renamed into place, so a reader on the same or another node sees the old
// entry or the new one, never half of one; a file that is not exactly what it
// claims to be (torn, corrupt, foreign) is ignored, and a later save replaces
// it. A full or read-only disk costs one warning per process, never an error:
// the database only saves time. The directory is kept under a size bound,
// least recently used entries evicted first.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torch_cudnn_algo {

// The directory, read on every call: TORCH_CUDNN_ALGO_DB (or, if that is
// unset, the older TORCH_CUDNN_ALGO_COMPILE_CACHE); unset,
// $XDG_CACHE_HOME/torch_cudnn_algo/db, else ~/.cache/torch_cudnn_algo/db;
// "" when off (the variable "0" or empty, or no home directory). A variable
// naming something that is not a directory warns once and the default is used.
std::string tuning_db_dir();

// The size bound in bytes: TORCH_CUDNN_ALGO_DB_MAX_MB megabytes (default 1024;
// a value that is not a whole number from 1 warns once and the default is used).
int64_t tuning_db_max_bytes();

enum class DbKind : int8_t {
  kDecision,       // a tuning's pick for one configuration under one set of rules
  kExecutionPlan,  // a runtime-compiled engine's execution plan, serialized
};

// "decision" or "execution_plan"; db_kind_named is its inverse (nullopt: neither).
const char* db_kind_name(DbKind kind);
std::optional<DbKind> db_kind_named(const std::string& name);

struct DbEntry {
  std::string key;             // everything that makes it valid, as text
  std::string header;          // a JSON object: what a listing shows
  std::vector<uint8_t> blob;   // a serialized execution plan, or empty
};

// The entry saved under `key`, or nullopt: none, or a file that is not whole
// (then counted as rejected, and `*rejected` set if given). Marks it used, for
// eviction.
std::optional<DbEntry> db_load(DbKind kind, const std::string& key, bool* rejected = nullptr);

// Saves `entry` in place of any entry under the same key. Returns whether it
// was written; a failure warns once per process and is otherwise ignored.
bool db_save(DbKind kind, const DbEntry& entry);

// One whole entry file of the directory.
struct DbFile {
  std::string path;
  DbKind kind;
  DbEntry entry;
  int64_t bytes = 0;
  int64_t modified_ns = 0;  // last written or used, since the epoch
};

// Every whole entry in the directory (`dir`, or the database's when empty);
// files that are not (torn, corrupt, foreign, half-written aside) are skipped.
// With `with_blobs` false the blobs are left empty (a listing needs none).
std::vector<DbFile> db_scan(bool with_blobs, const std::string& dir = "");

// Removes the entry files among `paths` (files of the directory with an entry
// suffix; anything else is left alone); returns how many it removed.
int64_t db_remove(const std::vector<std::string>& paths);

// Removes every entry file and every file left aside by an interrupted write;
// returns how many entry files it removed.
int64_t db_clear();

// Claims an entry's key on this node while alive: processes of one node that
// meet a new configuration at once tune it once. A lock file (flock) in a
// node-local directory ($TMPDIR or /tmp), named by a hash of the database
// directory, the kind and the key; the kernel releases it when its process
// dies. Across nodes sharing the directory nothing is claimed: each node
// tunes, and the later save replaces the earlier.
class DbClaim {
 public:
  // Waits up to `wait` for the claim. Not owned when the wait ran out or no
  // lock file can be made (the caller then goes ahead unclaimed).
  DbClaim(DbKind kind, const std::string& key, std::chrono::milliseconds wait);
  ~DbClaim();
  DbClaim(const DbClaim&) = delete;
  DbClaim& operator=(const DbClaim&) = delete;
  bool owned() const { return fd_ >= 0; }
  // Whether another process held the claim when this one asked for it.
  bool waited() const { return waited_; }

 private:
  int fd_ = -1;
  bool waited_ = false;
};

// When and where an entry is saved, as its header records them: UTC time as
// ISO 8601 to the second ("2026-11-27T14:05:09Z"), and this host's name.
std::string utc_now_iso();
std::string host_name();

// Monotonic counts since the process started, for tests and benchmarks.
struct DbCounts {
  int64_t loaded = 0;       // entries read whole
  int64_t saved = 0;        // entries written
  int64_t rejected = 0;     // files found under a key but not whole (torn, corrupt, another key's)
  int64_t save_failed = 0;  // writes that failed (read-only or full disk)
  int64_t evicted = 0;      // entries removed to keep the size bound
};
DbCounts db_counts();

}  // namespace torch_cudnn_algo
