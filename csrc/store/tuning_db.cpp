#include "store/tuning_db.h"

#include "base/common.h"
#include "base/python_bridge.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <thread>

namespace torch_cudnn_algo {
namespace {

namespace fs = std::filesystem;

// The file: kMagic, u64 key length, the key, u64 header length, the header,
// u64 blob length, u64 FNV-1a of key, header and blob, the blob. Native byte
// order and a checksum, not a signature: the directory is the user's own.
constexpr char kMagic[8] = {'T', 'C', 'A', 'D', 'B', '0', '0', '1'};
constexpr uint64_t kMaxPartBytes = uint64_t{1} << 30;
constexpr const char* kAsideMark = ".aside.";  // path + mark + pid + serial: a write in progress
// Saves between two checks of the size bound (a check stats every file), or
// fewer when they wrote more than this fraction of the bound.
constexpr int64_t kSavesPerSizeCheck = 32;
constexpr int64_t kBoundFractionPerSizeCheck = 8;
// Eviction goes down to this fraction of the bound, so the next saves do not evict again at once.
constexpr double kEvictTo = 0.9;
// A file left aside this long is a killed writer's, not a write in progress.
constexpr int64_t kStaleAsideNs = int64_t{3600} * 1'000'000'000;

std::atomic<int64_t> g_loaded{0}, g_saved{0}, g_rejected{0}, g_save_failed{0}, g_evicted{0};
std::atomic<int64_t> g_saves_since_check{kSavesPerSizeCheck};  // the first save checks
std::atomic<int64_t> g_bytes_since_check{0};
std::once_flag g_save_warning;

uint64_t fnv1a(const void* data, size_t bytes, uint64_t hash = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

uint64_t checksum(const std::string& key, const std::string& header, const uint8_t* blob, size_t blob_bytes) {
  return fnv1a(blob, blob_bytes, fnv1a(header.data(), header.size(), fnv1a(key.data(), key.size())));
}

const char* suffix_of(DbKind kind) {
  return kind == DbKind::kDecision ? ".decision" : ".plan";
}

std::optional<DbKind> kind_of_path(const fs::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".decision") return DbKind::kDecision;
  if (ext == ".plan") return DbKind::kExecutionPlan;
  return std::nullopt;
}

fs::path file_for(const std::string& dir, DbKind kind, const std::string& key) {
  const std::string named = std::string(db_kind_name(kind)) + "\n" + key;
  char name[40];
  std::snprintf(name, sizeof(name), "%016llx%s", static_cast<unsigned long long>(fnv1a(named.data(), named.size())),
                suffix_of(kind));
  return fs::path(dir) / name;
}

bool read_file(const fs::path& path, std::string* data) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return false;
  data->assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  return !file.bad();
}

bool take_u64(const std::string& data, size_t* at, uint64_t* value) {
  if (data.size() - *at < sizeof(uint64_t)) return false;
  std::memcpy(value, data.data() + *at, sizeof(uint64_t));
  *at += sizeof(uint64_t);
  return true;
}

bool take_text(const std::string& data, size_t* at, std::string* text) {
  uint64_t bytes = 0;
  if (!take_u64(data, at, &bytes) || bytes > kMaxPartBytes || data.size() - *at < bytes) return false;
  text->assign(data, *at, bytes);
  *at += bytes;
  return true;
}

// The entry a file's bytes hold when they are a whole entry file, else nullopt.
std::optional<DbEntry> parse_entry(const std::string& data, bool with_blob) {
  size_t at = sizeof(kMagic);
  if (data.size() < at || std::memcmp(data.data(), kMagic, at) != 0) return std::nullopt;
  DbEntry entry;
  uint64_t blob_bytes = 0, sum = 0;
  if (!take_text(data, &at, &entry.key) || !take_text(data, &at, &entry.header) ||
      !take_u64(data, &at, &blob_bytes) || !take_u64(data, &at, &sum) || data.size() - at != blob_bytes) {
    return std::nullopt;  // truncated, or not ours
  }
  const auto* blob = reinterpret_cast<const uint8_t*>(data.data() + at);
  if (checksum(entry.key, entry.header, blob, blob_bytes) != sum) return std::nullopt;  // corrupt
  if (with_blob) entry.blob.assign(blob, blob + blob_bytes);
  return entry;
}

std::string serialize(const DbEntry& entry) {
  std::string out(kMagic, sizeof(kMagic));
  const auto put_u64 = [&](uint64_t value) { out.append(reinterpret_cast<const char*>(&value), sizeof(value)); };
  put_u64(entry.key.size());
  out += entry.key;
  put_u64(entry.header.size());
  out += entry.header;
  put_u64(entry.blob.size());
  put_u64(checksum(entry.key, entry.header, entry.blob.data(), entry.blob.size()));
  out.append(reinterpret_cast<const char*>(entry.blob.data()), entry.blob.size());
  return out;
}

void warn_save_failed(const std::string& dir, const std::string& why) {
  std::call_once(g_save_warning, [&] {
    try {
      warn_to_python("torch_cudnn_algo: cannot write the tuning database in " + dir + " (" + why +
                     "); this process's tuning is not kept for later runs. Set TORCH_CUDNN_ALGO_DB to a "
                     "writable directory, or to 0 to turn the database off.");
    } catch (...) {
      // warnings turned into errors: the database only saves time, it must not fail the caller
    }
  });
}

bool is_aside(const fs::path& path) {
  return path.filename().string().find(kAsideMark) != std::string::npos;
}

// Last written or used (see mark_used), in ns since the epoch; -1 if it cannot be read.
int64_t modified_ns(const fs::path& path) {
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0) return -1;
  return int64_t{status.st_mtim.tv_sec} * 1'000'000'000 + status.st_mtim.tv_nsec;
}

void mark_used(const fs::path& path) {
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // best effort: a read-only directory keeps its order
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Keeps the directory under its size bound: least recently used entry files
// go first; files left aside by killed writers go when stale.
void keep_size_bound(const std::string& dir) {
  const int64_t bound = tuning_db_max_bytes();
  struct Sized {
    fs::path path;
    int64_t used_ns;
    int64_t bytes;
  };
  std::vector<Sized> entries;
  int64_t total = 0;
  std::error_code error;
  const int64_t now = now_ns();
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const fs::path& path = it->path();
    const int64_t used = modified_ns(path);
    if (used < 0) continue;
    std::error_code stat_error;
    if (is_aside(path)) {
      if (now - used > kStaleAsideNs) fs::remove(path, stat_error);
      continue;
    }
    if (!kind_of_path(path)) continue;
    const auto bytes = static_cast<int64_t>(fs::file_size(path, stat_error));
    if (stat_error) continue;
    entries.push_back({path, used, bytes});
    total += bytes;
  }
  if (total <= bound) return;
  std::sort(entries.begin(), entries.end(), [](const Sized& a, const Sized& b) { return a.used_ns < b.used_ns; });
  const auto target = static_cast<int64_t>(kEvictTo * static_cast<double>(bound));
  for (const auto& entry : entries) {
    if (total <= target) break;
    std::error_code remove_error;
    if (fs::remove(entry.path, remove_error)) g_evicted.fetch_add(1, std::memory_order_relaxed);
    total -= entry.bytes;  // gone, or removed by another process meanwhile
  }
}

}  // namespace

namespace {

constexpr int64_t kDefaultMaxMb = 1024;

// One warning per setting and value that cannot be used (the settings are read
// on every call, and the package reads both at import, so a bad one is told
// there): what was set, what is valid, what is in force instead.
void warn_bad_setting(const char* name, const std::string& value, const std::string& why) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!warned.insert(std::string(name) + "=" + value).second) return;
  }
  try {
    warn_to_python("torch_cudnn_algo: ignoring " + std::string(name) + "=" + value + ": " + why);
  } catch (...) {
    // warnings turned into errors: a setting the database falls back from must not fail the caller
  }
}

std::string default_db_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/torch_cudnn_algo/db";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return std::string(home) + "/.cache/torch_cudnn_algo/db";
  return {};
}

}  // namespace

std::string tuning_db_dir() {
  for (const char* name : {"TORCH_CUDNN_ALGO_DB", "TORCH_CUDNN_ALGO_COMPILE_CACHE"}) {
    if (const char* set = std::getenv(name)) {
      const std::string dir = set;
      if (dir == "0" || dir.empty()) return {};
      std::error_code error;
      // A directory, or a path where one can be made: anything else there is not ours to write into.
      if (!fs::exists(dir, error) || fs::is_directory(dir, error)) return dir;
      const std::string fallback = default_db_dir();
      warn_bad_setting(name, dir, "it names something that is not a directory; set it to a directory (made "
                       "if missing), or to 0 to turn the tuning database off. Using " +
                       (fallback.empty() ? std::string("none: the database is off") : "the default " + fallback));
      return fallback;
    }
  }
  return default_db_dir();
}

int64_t tuning_db_max_bytes() {
  constexpr const char* kName = "TORCH_CUDNN_ALGO_DB_MAX_MB";
  const char* set = std::getenv(kName);
  if (set == nullptr) return kDefaultMaxMb << 20;
  const std::string text = set;
  // A whole number of megabytes, at least 1 and small enough to count in bytes.
  int64_t mb = 0;
  bool valid = !text.empty() && text.size() <= 12;
  for (const char c : text) valid = valid && c >= '0' && c <= '9';
  if (valid) mb = std::stoll(text);
  if (!valid || mb < 1) {
    warn_bad_setting(kName, text, "valid values are whole numbers of megabytes from 1 (e.g. 2048). Using the "
                     "default " + std::to_string(kDefaultMaxMb) + " MB");
    return kDefaultMaxMb << 20;
  }
  return mb << 20;
}

const char* db_kind_name(DbKind kind) {
  return kind == DbKind::kDecision ? "decision" : "execution_plan";
}

std::optional<DbKind> db_kind_named(const std::string& name) {
  if (name == "decision") return DbKind::kDecision;
  if (name == "execution_plan") return DbKind::kExecutionPlan;
  return std::nullopt;
}

std::optional<DbEntry> db_load(DbKind kind, const std::string& key, bool* rejected) {
  if (rejected != nullptr) *rejected = false;
  const std::string dir = tuning_db_dir();
  if (dir.empty()) return std::nullopt;
  const fs::path path = file_for(dir, kind, key);
  std::string data;
  if (!read_file(path, &data)) return std::nullopt;  // not saved yet
  auto entry = parse_entry(data, /*with_blob=*/true);
  if (!entry || entry->key != key) {  // not whole, or another key's under the same hash
    g_rejected.fetch_add(1, std::memory_order_relaxed);
    if (rejected != nullptr) *rejected = true;
    return std::nullopt;
  }
  mark_used(path);
  g_loaded.fetch_add(1, std::memory_order_relaxed);
  return entry;
}

bool db_save(DbKind kind, const DbEntry& entry) {
  const std::string dir = tuning_db_dir();
  if (dir.empty()) return false;
  if (entry.key.size() > kMaxPartBytes || entry.header.size() > kMaxPartBytes || entry.blob.size() > kMaxPartBytes) {
    g_save_failed.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  static std::atomic<uint64_t> serial{0};
  const fs::path path = file_for(dir, kind, entry.key);
  fs::path aside = path;
  aside += kAsideMark + std::to_string(::getpid()) + "." + std::to_string(serial++);
  std::error_code error;
  fs::create_directories(dir, error);
  std::string why = error ? error.message() : "";
  if (why.empty()) {
    const std::string bytes = serialize(entry);
    std::ofstream file(aside, std::ios::binary | std::ios::trunc);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    file.close();
    if (!file) {
      why = std::string("writing failed: ") + std::strerror(errno);
    } else {
      fs::rename(aside, path, error);  // atomic: a reader sees the old file or the new one
      if (error) why = error.message();
    }
  }
  if (!why.empty()) {
    fs::remove(aside, error);
    g_save_failed.fetch_add(1, std::memory_order_relaxed);
    warn_save_failed(dir, why);
    return false;
  }
  g_saved.fetch_add(1, std::memory_order_relaxed);
  const auto written = static_cast<int64_t>(entry.key.size() + entry.header.size() + entry.blob.size());
  if (g_saves_since_check.fetch_add(1, std::memory_order_relaxed) + 1 >= kSavesPerSizeCheck ||
      g_bytes_since_check.fetch_add(written, std::memory_order_relaxed) + written >=
          tuning_db_max_bytes() / kBoundFractionPerSizeCheck) {
    g_saves_since_check.store(0, std::memory_order_relaxed);
    g_bytes_since_check.store(0, std::memory_order_relaxed);
    keep_size_bound(dir);
  }
  return true;
}

std::vector<DbFile> db_scan(bool with_blobs, const std::string& scanned) {
  std::vector<DbFile> files;
  const std::string dir = scanned.empty() ? tuning_db_dir() : scanned;
  if (dir.empty()) return files;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const fs::path& path = it->path();
    const auto kind = kind_of_path(path);
    if (!kind || is_aside(path)) continue;
    std::string data;
    if (!read_file(path, &data)) continue;
    auto entry = parse_entry(data, with_blobs);
    // A whole file under another name than its key's is a copy or a rename: not an entry.
    if (!entry || file_for(dir, *kind, entry->key).filename() != path.filename()) continue;
    DbFile file;
    file.path = path.string();
    file.kind = *kind;
    file.entry = std::move(*entry);
    file.bytes = static_cast<int64_t>(data.size());
    file.modified_ns = std::max<int64_t>(0, modified_ns(path));
    files.push_back(std::move(file));
  }
  std::sort(files.begin(), files.end(), [](const DbFile& a, const DbFile& b) { return a.path < b.path; });
  return files;
}

int64_t db_remove(const std::vector<std::string>& paths) {
  const std::string dir = tuning_db_dir();
  if (dir.empty()) return 0;
  std::error_code error;
  const fs::path root = fs::weakly_canonical(dir, error);
  int64_t removed = 0;
  for (const auto& given : paths) {
    const fs::path path = fs::weakly_canonical(given, error);
    if (error || path.parent_path() != root || !kind_of_path(path) || is_aside(path)) continue;
    removed += fs::remove(path, error) ? 1 : 0;
  }
  return removed;
}

int64_t db_clear() {
  const std::string dir = tuning_db_dir();
  if (dir.empty()) return 0;
  std::vector<fs::path> ours;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (kind_of_path(it->path()) || is_aside(it->path())) ours.push_back(it->path());
  }
  int64_t removed = 0;
  for (const auto& path : ours) {
    const bool entry = !is_aside(path);
    if (fs::remove(path, error) && entry) ++removed;
  }
  return removed;
}

DbClaim::DbClaim(DbKind kind, const std::string& key, std::chrono::milliseconds wait) {
  const std::string dir = tuning_db_dir();
  if (dir.empty()) return;
  const char* tmp = std::getenv("TMPDIR");
  const fs::path locks = fs::path(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp") /
                         ("torch_cudnn_algo-claims-" + std::to_string(::getuid()));
  std::error_code error;
  fs::create_directories(locks, error);
  const std::string named = dir + "\n" + db_kind_name(kind) + "\n" + key;
  char name[40];
  std::snprintf(name, sizeof(name), "%016llx.lock",
                static_cast<unsigned long long>(fnv1a(named.data(), named.size())));
  const int fd = ::open((locks / name).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      ::close(fd);
      return;
    }
    waited_ = true;
    if (std::chrono::steady_clock::now() >= deadline) {
      ::close(fd);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  fd_ = fd;
}

DbClaim::~DbClaim() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

std::string utc_now_iso() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string host_name() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

DbCounts db_counts() {
  return {g_loaded.load(std::memory_order_relaxed), g_saved.load(std::memory_order_relaxed),
          g_rejected.load(std::memory_order_relaxed), g_save_failed.load(std::memory_order_relaxed),
          g_evicted.load(std::memory_order_relaxed)};
}

}  // namespace torch_cudnn_algo
