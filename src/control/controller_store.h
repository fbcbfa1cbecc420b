// Where the controllers' decisions and evidence survive restarts:
// $STATE_DIRECTORY/controller.json (systemd's StateDirectory=; the first of
// a colon-separated list), else /var/lib/tcpscope/controller.json.
//
// The daemon runs as root, so the directory must be root's alone (owned by
// this process's euid, not writable by group or others, not a symlink):
// otherwise another account could swap the file for a link to one root
// writes, or plant decisions. Writes are atomic (a temporary file in the
// same directory, fsync, rename, fsync of the directory), so a crash leaves
// the old state or the new one, never half of one.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tcpscope {

class ControllerStore {
 public:
  // The largest state load() accepts (and so save() writes: state_fit.h).
  static constexpr size_t kMaxStateBytes = size_t{64} << 20;

  // `dir` empty: from the environment as above.
  explicit ControllerStore(std::string dir = "");
  const std::string& path() const { return path_; }

  // The saved state; nullopt when there is none (no file) or it is unusable,
  // with *error saying why in the second case ("" in the first).
  std::optional<nlohmann::json> load(std::string* error) const;
  // Writes `text` (a state as state_fit.h fits it) as the state. Creates the
  // directory (0700) if missing. False + *error on failure, and for a text
  // over kMaxStateBytes, which load() would refuse.
  bool save(const std::string& text, std::string* error) const;
  // Moves a state that cannot be used (load() or the controller refused
  // it, or it is stale: state_writer.h) out of the way, so that the next
  // save does not overwrite what someone may want to look at, and no start
  // restores it: controller.json.unreadable-<unix seconds>, in the same
  // directory, never over another (a second in the same second is -2, and
  // so on); the kKeptUnreadable newest such files are kept. Returns the new
  // path; "" with *error empty when there is no state to move, "" with
  // *error on failure; a failure to remove an old one is also in *error.
  std::string set_aside(std::string* error) const;
  static constexpr size_t kKeptUnreadable = 3;

 private:
  std::string dir_, path_;
};

}  // namespace tcpscope
