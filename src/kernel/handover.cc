#include "kernel/handover.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exception>

namespace tcpscope {

namespace {

constexpr const char* kParcelName = "tcpscope-handover";
// SCM_MAX_FD: the most descriptors one message may carry.
constexpr size_t kMaxFds = 253;
constexpr size_t kMaxManifestBytes = 1 << 20;

std::string errno_text(int err) { return std::string(strerror(err)) + " (errno " + std::to_string(err) + ")"; }

}  // namespace

void Handover::release() {
  for (auto* list : {&maps, &links})
    for (auto& o : *list)
      if (o.fd >= 0) ::close(o.fd);
  maps.clear();
  links.clear();
}

bool store_handover(const FdStore& store, const Handover& h, std::string* error) {
  nlohmann::json manifest = {{"layout_version", h.layout_version}, {"generation", h.generation}, {"policy", h.policy}};
  std::vector<int> fds;
  for (const auto& [kind, list] : {std::pair<const char*, const std::vector<NamedFd>*>{"maps", &h.maps},
                                   std::pair<const char*, const std::vector<NamedFd>*>{"links", &h.links}}) {
    manifest[kind] = nlohmann::json::array();
    for (const auto& o : *list) {
      manifest[kind].push_back(o.name);
      fds.push_back(o.fd);
    }
  }
  if (fds.size() > kMaxFds) {
    *error = "handover: " + std::to_string(fds.size()) + " descriptors, more than one message carries";
    return false;
  }
  const std::string text = manifest.dump();
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    *error = "handover: socketpair: " + errno_text(errno);
    return false;
  }
  bool ok = send_with_fds(pair[1], nullptr, 0, text, fds) == static_cast<ssize_t>(text.size());
  if (!ok) *error = "handover: sending the parcel: " + errno_text(errno);
  // The earlier parcel goes first: the manager passes every stored
  // descriptor, and only this one's message is the current state.
  ok = ok && store.remove(kParcelName, error) && store.store(kParcelName, {pair[0], pair[1]}, error);
  ::close(pair[0]);
  ::close(pair[1]);
  return ok;
}

std::optional<Handover> take_handover(const FdStore& store, std::string* error) {
  std::vector<int> ends;
  for (const auto& f : store.inherited())
    if (f.name == kParcelName) ends.push_back(f.fd);
  if (ends.empty()) return std::nullopt;
  std::string text(kMaxManifestBytes, '\0');
  std::vector<char> control(CMSG_SPACE(sizeof(int) * kMaxFds), 0);
  std::vector<int> fds;
  bool received = false;
  for (int end : ends) {
    iovec iov{text.data(), text.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    const ssize_t n = recvmsg(end, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) continue;  // the sending end: nothing queued there
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        const size_t at = fds.size();
        fds.resize(at + count);
        memcpy(fds.data() + at, CMSG_DATA(c), sizeof(int) * count);
      }
    text.resize(static_cast<size_t>(n));
    received = !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
    if (!received) *error = "handover: the parcel was cut short";
    break;
  }
  for (int end : ends) ::close(end);
  std::string ignored;
  store.remove(kParcelName, &ignored);  // ours now: the manager's copies go
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  if (!received) {
    close_all();
    if (error->empty()) *error = "handover: the stored parcel holds no message";
    return std::nullopt;
  }
  Handover h;
  try {
    const auto manifest = nlohmann::json::parse(text);
    h.layout_version = manifest.at("layout_version").get<uint32_t>();
    h.generation = manifest.at("generation").get<uint32_t>();
    h.policy = manifest.value("policy", nlohmann::json());
    size_t next = 0;
    for (auto [kind, list] : {std::pair<const char*, std::vector<NamedFd>*>{"maps", &h.maps},
                              std::pair<const char*, std::vector<NamedFd>*>{"links", &h.links}})
      for (const auto& name : manifest.at(kind)) {
        if (next >= fds.size()) throw std::invalid_argument("more names than descriptors");
        list->push_back({name.get<std::string>(), fds[next++]});
      }
    if (next != fds.size()) throw std::invalid_argument("more descriptors than names");
  } catch (const std::exception& e) {
    close_all();
    *error = std::string("handover: the parcel's manifest is malformed: ") + e.what();
    return std::nullopt;
  }
  return h;
}

}  // namespace tcpscope
