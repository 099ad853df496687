// Copyright rpcguard authors.
//
// internal::MethodCache: what rpcguard keeps per method, looked up on every
// call by the method's path, built on the method's first call.
//
// Every call of every channel of a factory looks its method up here, from
// whatever thread it runs on, while new methods arrive rarely and are never
// removed. So reads take no lock and write nothing shared: a lock, even an
// uncontended one, makes the lock's cache line bounce between the cores of
// concurrent callers. //bench:decision_bench measures the lookup.
//
// The table is open-addressed, with one atomic pointer per slot to an
// immutable entry. A reader hashes the path and probes until it finds the
// path or an empty slot. A writer (under a mutex) fills an empty slot with a
// release store, so a reader sees either nothing (and takes the slow path,
// which locks and finds it) or the whole entry. The table is replaced by one
// twice as large when half full; replaced tables and entries live as long as
// the cache, since readers may still be probing them: at most twice the
// final size in all.
//
// Insert-only is safe only for keys that are few. The caller says which
// paths are (those its config or compiled-in protos declare: Get) and which
// a remote party may invent without end (GetCounted, refused past a limit).
// A refused path is the caller's to serve from a shared value; SharedMemo
// below remembers which one, lock-free, so that a refused path's later
// calls take no lock either.
//
// Internal to rpcguard.

#ifndef RPCGUARD_BASE_METHOD_CACHE_H_
#define RPCGUARD_BASE_METHOD_CACHE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "rpcguard/base/mutex.h"

namespace rpcguard {
namespace internal {

// An insert-only map from method path to a `Value` built once per path.
// Thread-safe. Values never move and live as long as the cache.
template <typename Value>
class MethodCache {
 public:
  MethodCache() {
    tables_.push_back(std::make_unique<Table>(kInitialSlots));
    table_.store(tables_.back().get(), std::memory_order_release);
  }
  MethodCache(const MethodCache&) = delete;
  MethodCache& operator=(const MethodCache&) = delete;

  // The value for `path`. On the path's first lookup `make(path)` builds it
  // (a std::unique_ptr<Value>), outside the cache's lock, since building may
  // be slow; when two threads race on a new path, both build and the first
  // to finish wins. For paths that are few (declared ones): nothing bounds
  // how many Get() keeps.
  template <typename Make>
  const Value& Get(absl::string_view path, Make make) const {
    const size_t hash = absl::Hash<absl::string_view>()(path);
    if (const Value* found =
            Find(table_.load(std::memory_order_acquire), path, hash)) {
      return *found;
    }
    return Build(path, hash, make).first;
  }

  // Get() for a path that counts against `limit`: null, building nothing,
  // when `limit` counted paths are held already and `path` is not one of
  // them. A slot is reserved before `make` runs, so that no more than
  // `limit` counted values are ever kept, however many threads race; past
  // the limit a refusal is one relaxed load, with no lock taken.
  template <typename Make>
  const Value* GetCounted(absl::string_view path, size_t limit,
                          Make make) const {
    const size_t hash = absl::Hash<absl::string_view>()(path);
    if (const Value* found =
            Find(table_.load(std::memory_order_acquire), path, hash)) {
      return found;
    }
    size_t n = counted_.load(std::memory_order_relaxed);
    do {
      if (n >= limit) return nullptr;
    } while (
        !counted_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
    const std::pair<const Value&, bool> got = Build(path, hash, make);
    // Another thread cached the path first: the reserved slot is not used.
    if (!got.second) counted_.fetch_sub(1, std::memory_order_relaxed);
    return &got.first;
  }

  // The value for `path` if it was built already, else null. Lock-free.
  const Value* Find(absl::string_view path) const {
    return Find(table_.load(std::memory_order_acquire), path,
                absl::Hash<absl::string_view>()(path));
  }

  // Methods cached so far, by Get() and GetCounted().
  size_t size() const {
    MutexLock lock(&mu_);
    return size_;
  }

  // Methods GetCounted() cached so far: at most its `limit`.
  size_t counted() const { return counted_.load(std::memory_order_relaxed); }

 private:
  static constexpr size_t kInitialSlots = 16;  // a power of two

  struct Entry {
    const std::string path;
    const Value* const value;
  };
  struct Table {
    explicit Table(size_t n) : slots(n) {}
    std::vector<std::atomic<const Entry*>> slots;
  };

  // Null when `path` is not in `table`. Lock-free.
  static const Value* Find(const Table* table, absl::string_view path,
                           size_t hash) {
    const size_t mask = table->slots.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      const Entry* e = table->slots[i].load(std::memory_order_acquire);
      if (e == nullptr) return nullptr;  // never full: half at most
      if (e->path == path) return e->value;
    }
  }

  // Builds and publishes `path`'s value unless another thread did first;
  // the value, and whether this call built it.
  template <typename Make>
  std::pair<const Value&, bool> Build(absl::string_view path, size_t hash,
                                      Make make) const {
    std::unique_ptr<Value> built = make(path);
    MutexLock lock(&mu_);
    Table* table = table_.load(std::memory_order_relaxed);
    if (const Value* found = Find(table, path, hash)) return {*found, false};
    if (2 * (size_ + 1) > table->slots.size()) table = Grow(table);
    entries_.push_back(
        std::make_unique<const Entry>(Entry{std::string(path), built.get()}));
    Insert(table, entries_.back().get(), hash);
    ++size_;
    values_.push_back(std::move(built));
    return {*values_.back(), true};
  }

  static void Insert(Table* table, const Entry* entry, size_t hash) {
    const size_t mask = table->slots.size() - 1;
    size_t i = hash & mask;
    while (table->slots[i].load(std::memory_order_relaxed) != nullptr) {
      i = (i + 1) & mask;
    }
    table->slots[i].store(entry, std::memory_order_release);
  }

  // Publishes a table twice the size of `old`, with its entries.
  Table* Grow(Table* old) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto bigger = std::make_unique<Table>(2 * old->slots.size());
    for (const auto& slot : old->slots) {
      const Entry* e = slot.load(std::memory_order_relaxed);
      if (e != nullptr) {
        Insert(bigger.get(), e, absl::Hash<absl::string_view>()(e->path));
      }
    }
    Table* published = bigger.get();
    tables_.push_back(std::move(bigger));
    table_.store(published, std::memory_order_release);
    return published;
  }

  // The table readers probe: the last of tables_.
  mutable std::atomic<Table*> table_{nullptr};
  mutable Mutex mu_;
  mutable size_t size_ ABSL_GUARDED_BY(mu_) = 0;
  // Slots reserved by GetCounted(): its values, and those being built.
  mutable std::atomic<size_t> counted_{0};
  mutable std::vector<std::unique_ptr<Value>> values_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<std::unique_ptr<const Entry>> entries_
      ABSL_GUARDED_BY(mu_);
  // Every table ever published: readers may still probe an old one.
  mutable std::vector<std::unique_ptr<Table>> tables_ ABSL_GUARDED_BY(mu_);
};

// A fixed-size, lossy, lock-free map from path to one of a few shared
// values: what the caller of MethodCache::GetCounted decided for a refused
// path, so that it decides once per path, not once per call, while the path
// stays here. Direct-mapped: a slot holds the last path stored in it, so
// paths that share a slot evict each other and are decided again (correct,
// only slower). A slot keeps a 63-bit fingerprint of its path, not the path:
// two paths with one slot and one fingerprint (odds near 2^-63 a pair) get
// one answer, so store only answers for which that is harmless.
//
// Thread-safe. Find and Store never block: a Store that finds its slot being
// written by another gives up (it is a cache). The slots, 16 bytes each, are
// allocated by the first Store.
template <typename Value>
class SharedMemo {
 public:
  // `slots`: rounded up to a power of two, at least 16.
  explicit SharedMemo(size_t slots) {
    size_t n = 16;
    while (n < slots) n *= 2;
    mask_ = n - 1;
  }
  ~SharedMemo() { delete[] slots_.load(std::memory_order_acquire); }
  SharedMemo(const SharedMemo&) = delete;
  SharedMemo& operator=(const SharedMemo&) = delete;

  // The value last stored for `path`, or null.
  const Value* Find(absl::string_view path) const {
    const Slot* slots = slots_.load(std::memory_order_acquire);
    if (slots == nullptr) return nullptr;
    size_t index;
    const uint64_t want = Fingerprint(path, &index);
    const Slot& slot = slots[index];
    if (slot.fingerprint.load(std::memory_order_acquire) != want) {
      return nullptr;
    }
    const Value* value = slot.value.load(std::memory_order_acquire);
    // Read again: a writer claims the slot (kBusy) before it replaces the
    // value, so an unchanged fingerprint means `value` is this path's.
    if (slot.fingerprint.load(std::memory_order_acquire) != want) {
      return nullptr;
    }
    return value;
  }

  // Remembers `value` for `path`, evicting the slot's last path.
  void Store(absl::string_view path, const Value* value) const {
    Slot* slots = slots_.load(std::memory_order_acquire);
    if (slots == nullptr) {
      auto* fresh = new Slot[mask_ + 1];
      if (slots_.compare_exchange_strong(slots, fresh,
                                         std::memory_order_acq_rel)) {
        slots = fresh;
      } else {
        delete[] fresh;  // another Store installed them first: `slots`
      }
    }
    size_t index;
    const uint64_t fingerprint = Fingerprint(path, &index);
    Slot& slot = slots[index];
    uint64_t old = slot.fingerprint.load(std::memory_order_relaxed);
    if (old == kBusy || !slot.fingerprint.compare_exchange_strong(
                            old, kBusy, std::memory_order_acq_rel)) {
      return;
    }
    slot.value.store(value, std::memory_order_release);
    slot.fingerprint.store(fingerprint, std::memory_order_release);
  }

 private:
  // Fingerprints are even and non-zero; 0 is an empty slot.
  static constexpr uint64_t kBusy = 1;

  struct Slot {
    std::atomic<uint64_t> fingerprint{0};
    std::atomic<const Value*> value{nullptr};
  };

  // The path's fingerprint, and its slot in `*index`: two independent
  // hashes, so that paths sharing a slot still differ in fingerprint.
  uint64_t Fingerprint(absl::string_view path, size_t* index) const {
    *index = absl::Hash<absl::string_view>()(path) & mask_;
    const uint64_t h = absl::Hash<std::pair<absl::string_view, uint64_t>>()(
        {path, uint64_t{0x9e3779b97f4a7c15}});
    return (h | 2) & ~uint64_t{1};
  }

  size_t mask_ = 0;
  // Written once, by the first Store; never replaced.
  mutable std::atomic<Slot*> slots_{nullptr};
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_BASE_METHOD_CACHE_H_
