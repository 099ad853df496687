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
// Internal to rpcguard.

#ifndef RPCGUARD_INTERNAL_BASE_METHOD_CACHE_H_
#define RPCGUARD_INTERNAL_BASE_METHOD_CACHE_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "rpcguard/internal/base/mutex.h"

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
  // to finish wins.
  template <typename Make>
  const Value& Get(absl::string_view path, Make make) const {
    const size_t hash = absl::Hash<absl::string_view>()(path);
    if (const Value* found =
            Find(table_.load(std::memory_order_acquire), path, hash)) {
      return *found;
    }
    std::unique_ptr<Value> built = make(path);
    MutexLock lock(&mu_);
    Table* table = table_.load(std::memory_order_relaxed);
    if (const Value* found = Find(table, path, hash)) return *found;
    if (2 * (size_ + 1) > table->slots.size()) table = Grow(table);
    entries_.push_back(
        std::make_unique<const Entry>(Entry{std::string(path), built.get()}));
    Insert(table, entries_.back().get(), hash);
    ++size_;
    values_.push_back(std::move(built));
    return *values_.back();
  }

  // The value for `path` if it was built already, else null. Lock-free.
  const Value* Find(absl::string_view path) const {
    return Find(table_.load(std::memory_order_acquire), path,
                absl::Hash<absl::string_view>()(path));
  }

  // Methods cached so far.
  size_t size() const {
    MutexLock lock(&mu_);
    return size_;
  }

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
  mutable std::vector<std::unique_ptr<Value>> values_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<std::unique_ptr<const Entry>> entries_
      ABSL_GUARDED_BY(mu_);
  // Every table ever published: readers may still probe an old one.
  mutable std::vector<std::unique_ptr<Table>> tables_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_BASE_METHOD_CACHE_H_
