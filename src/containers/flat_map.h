// A hash map of integer keys whose entries sit in one array: a lookup that
// hits reads one slot, where std::unordered_map reads its bucket, the node
// before the entry's and the entry's node. The per-record lookups (the
// cgroup a socket is in, the key a ranking counts bytes for) run on a core
// that the kernel's network work and the load share, so their tables are
// cold at each drain and every dependent load is a cache (and often TLB)
// miss; at 1,000 services that was most of what naming them cost.
//
// Open addressing with linear probing over a power-of-two array kept at most
// half full; erase shifts the probe run back, so there are no tombstones.
// Key{} (0) marks an empty slot and cannot be stored: both users keep 0 for
// "none" and handle it before the table. Pointers and references to values
// are invalidated by any insert or erase.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace tcpscope {

template <class Key, class Value>
class FlatMap {
  static_assert(std::is_integral_v<Key> && std::is_unsigned_v<Key>, "FlatMap keys are unsigned integers");

 public:
  FlatMap() : slots_(kMinSlots) {}

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  Value* find(Key key) {
    if (key == Key{}) return nullptr;
    for (size_t i = home(key);; i = next(i)) {
      Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == Key{}) return nullptr;
    }
  }
  const Value* find(Key key) const { return const_cast<FlatMap*>(this)->find(key); }
  bool contains(Key key) const { return find(key) != nullptr; }

  // The value for `key`, made from `args` if it has none. Returns the value
  // and whether it was made. `key` must not be 0.
  template <class... Args>
  std::pair<Value*, bool> try_emplace(Key key, Args&&... args) {
    if (Value* v = find(key)) return {v, false};
    if (2 * (size_ + 1) > slots_.size()) grow();
    size_t i = home(key);
    while (slots_[i].key != Key{}) i = next(i);
    slots_[i].key = key;
    slots_[i].value = Value(std::forward<Args>(args)...);
    ++size_;
    return {&slots_[i].value, true};
  }
  Value& operator[](Key key) { return *try_emplace(key).first; }

  bool erase(Key key) {
    if (key == Key{}) return false;
    size_t i = home(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == Key{}) return false;
      i = next(i);
    }
    // Backward shift: move each later entry of the probe run into the hole
    // unless its home lies cyclically in (hole, its slot].
    for (size_t j = next(i);; j = next(j)) {
      Slot& s = slots_[j];
      if (s.key == Key{}) break;
      const size_t h = home(s.key);
      const bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
      if (stays) continue;
      slots_[i] = std::move(s);
      i = j;
    }
    slots_[i] = Slot{};
    --size_;
    return true;
  }

  void clear() {
    std::vector<Slot>(kMinSlots).swap(slots_);
    size_ = 0;
  }

  // Calls f(key, value&) for every entry, in no particular order. f must not
  // insert or erase.
  template <class F>
  void for_each(F&& f) {
    for (Slot& s : slots_)
      if (s.key != Key{}) f(s.key, s.value);
  }
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.key != Key{}) f(s.key, s.value);
  }

  // Erases the entries for which pred(key, value&) holds; returns how many.
  template <class Pred>
  size_t erase_if(Pred&& pred) {
    std::vector<Key> gone;
    for_each([&](Key k, Value& v) {
      if (pred(k, v)) gone.push_back(k);
    });
    for (Key k : gone) erase(k);
    return gone.size();
  }

 private:
  static constexpr size_t kMinSlots = 16;
  struct Slot {
    Key key{};
    Value value{};
  };

  size_t home(Key key) const {
    // murmur3's 64-bit finaliser: cgroup ids and AS numbers come in runs.
    uint64_t h = static_cast<uint64_t>(key);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return static_cast<size_t>(h) & (slots_.size() - 1);
  }
  size_t next(size_t i) const { return (i + 1) & (slots_.size() - 1); }

  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (Slot& s : old) {
      if (s.key == Key{}) continue;
      size_t i = home(s.key);
      while (slots_[i].key != Key{}) i = next(i);
      slots_[i] = std::move(s);
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace tcpscope
