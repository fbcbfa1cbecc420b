// What a running daemon hands to the next one across a restart (docs/packaging.md
// "Restarts"): the BPF maps and links it runs on, so that the programs stay
// attached and keep recording while no daemon runs, the per-socket state of
// open flows lives on, and the next daemon drains the ring where this one
// stopped.
//
// How they survive: systemd's file descriptor store (os/fd_store.h) keeps
// descriptors across a restart and closes them when the service stops for
// good. A BPF map's descriptor cannot go there itself (it polls as an error,
// and the manager drops such descriptors), so the objects travel as a
// parcel: one message queued in a socket pair, carrying every descriptor
// (SCM_RIGHTS) and a manifest (names, layout version, programs' generation,
// the policy's user-space state); the pair's two ends go to the store. A
// descriptor in flight keeps its object alive; when the service stops, the
// manager closes the pair, the message goes, and so does everything in it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "os/fd_store.h"

namespace tcpscope {

struct Handover {
  uint32_t layout_version = 0;  // TCPSCOPE_LAYOUT_VERSION of the daemon that packed it
  uint32_t generation = 0;      // its programs' generation (the active one)
  std::vector<NamedFd> maps, links;
  nlohmann::json policy;        // the policy's user-space state (kernel/installed_policy.h)

  // Closes every descriptor it holds.
  void release();
};

// Packs `h` (its descriptors are duplicated, the caller keeps its own) and
// gives the parcel to the service manager in place of any earlier one.
bool store_handover(const FdStore& store, const Handover& h, std::string* error);

// The parcel the service manager passed to this process, unpacked and
// taken out of the store (its descriptors are the caller's now); nullopt
// when there is none, or, with *error set, when it cannot be read.
std::optional<Handover> take_handover(const FdStore& store, std::string* error);

}  // namespace tcpscope
