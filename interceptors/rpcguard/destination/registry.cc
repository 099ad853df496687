// Copyright rpcguard authors.

#include "rpcguard/destination/registry.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "rpcguard/base/mutex.h"

namespace rpcguard {

// The registry's listeners, shared with its breakers (which may outlive it):
// those of every breaker, and those of one key each. Copy-on-write: Notify
// takes the lock only for one hash lookup and to copy two pointers, and calls
// the listeners without it, so a listener may add or remove listeners.
//
// A transition of key K costs a lookup of K and of each prefix of K that
// ends before a '/' (a handful), and a call of each listener of those (plus
// the all-keys ones): a process with a channel per destination does not
// call every channel's listener for every transition.
// The map is keyed by what callers choose (destinations), so a key's entry
// is erased with its last listener.
class BreakerRegistry::Listeners {
 public:
  ListenerId Add(BreakerListener listener) {
    internal::MutexLock lock(&mu_);
    const ListenerId id = next_id_++;
    all_ = With(*all_, id, std::move(listener));
    return id;
  }

  ListenerId Add(absl::string_view key, BreakerListener listener) {
    internal::MutexLock lock(&mu_);
    const ListenerId id = next_id_++;
    std::shared_ptr<const List>& list = by_key_[key];
    list = With(list == nullptr ? List() : *list, id, std::move(listener));
    key_of_.emplace(id, std::string(key));
    return id;
  }

  void Remove(ListenerId id) {
    internal::MutexLock lock(&mu_);
    auto key = key_of_.find(id);
    if (key == key_of_.end()) {
      all_ = Without(*all_, id);
      return;
    }
    auto it = by_key_.find(key->second);
    // Always found: an entry lives as long as it has a listener.
    if (it != by_key_.end()) {
      std::shared_ptr<const List> next = Without(*it->second, id);
      if (next->empty()) {
        by_key_.erase(it);
      } else {
        it->second = std::move(next);
      }
    }
    key_of_.erase(key);
  }

  void Notify(const BreakerTransition& transition) {
    std::shared_ptr<const List> all;
    // The lists of the key and of each prefix of it that ends before a '/'
    // (its destination, for a per-service key), shortest first.
    absl::InlinedVector<std::shared_ptr<const List>, 2> own;
    {
      internal::MutexLock lock(&mu_);
      all = all_;
      const absl::string_view key = transition.key;
      for (size_t i = 0; !by_key_.empty() && i <= key.size(); ++i) {
        if (i < key.size() && key[i] != '/') continue;
        auto it = by_key_.find(key.substr(0, i));
        if (it != by_key_.end()) own.push_back(it->second);
      }
    }
    for (const auto& l : *all) l.second(transition);
    for (const auto& list : own) {
      for (const auto& l : *list) l.second(transition);
    }
  }

  size_t keys() {
    internal::MutexLock lock(&mu_);
    return by_key_.size();
  }

 private:
  using List = std::vector<std::pair<ListenerId, BreakerListener>>;

  static std::shared_ptr<const List> With(List list, ListenerId id,
                                          BreakerListener listener) {
    list.emplace_back(id, std::move(listener));
    return std::make_shared<const List>(std::move(list));
  }
  static std::shared_ptr<const List> Without(const List& list, ListenerId id) {
    auto next = std::make_shared<List>();
    next->reserve(list.size());
    for (const auto& l : list) {
      if (l.first != id) next->push_back(l);
    }
    return next;
  }

  internal::Mutex mu_;
  std::shared_ptr<const List> all_ ABSL_GUARDED_BY(mu_) =
      std::make_shared<const List>();
  absl::flat_hash_map<std::string, std::shared_ptr<const List>> by_key_
      ABSL_GUARDED_BY(mu_);
  // The key of each listener of one key (all-keys listeners are not here).
  absl::flat_hash_map<ListenerId, std::string> key_of_ ABSL_GUARDED_BY(mu_);
  ListenerId next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

struct BreakerRegistry::State {
  struct Entry {
    std::shared_ptr<CircuitBreaker> breaker;
    std::shared_ptr<RetryBudget> budget;
    std::shared_ptr<RetryThrottle> throttle;
    std::shared_ptr<AdaptiveThrottle> adaptive;
    // The last lookup, or the last sweep that found the entry in use: how
    // long an unused OPEN or HALF_OPEN breaker has been left alone.
    absl::Time last_used;
  };
  struct Shard {
    internal::Mutex mu;
    absl::flat_hash_map<std::string, Entry> entries ABSL_GUARDED_BY(mu);
    // A lookup that adds a key to a shard this large sweeps it first.
    size_t sweep_at ABSL_GUARDED_BY(mu) = kMinSweepAt;
  };
  static constexpr size_t kShards = 16;
  // Small enough that a registry of forgotten destinations stays small (16 x
  // 32 entries of a few KiB), large enough that a few live keys do not
  // sweep on every new one.
  static constexpr size_t kMinSweepAt = 32;

  Shard& ShardFor(absl::string_view key) {
    return shards[absl::Hash<absl::string_view>{}(key) % kShards];
  }

  // Calls `f` on the entry of `key`, under its shard's lock, adding the
  // entry if needed (and sweeping the shard first when it has reached its
  // threshold).
  template <typename F>
  auto WithEntry(absl::string_view key, absl::Time now, F f) {
    Shard& shard = ShardFor(key);
    // Declared before the lock, so destroyed after it is released.
    std::vector<Entry> evicted;
    internal::MutexLock lock(&shard.mu);
    auto it = shard.entries.find(key);
    if (it == shard.entries.end()) {
      if (shard.entries.size() >= shard.sweep_at) {
        SweepLocked(shard, now, evicted);
      }
      it = shard.entries.emplace(key, Entry{}).first;
    }
    it->second.last_used = now;
    return f(it->second);
  }

  // Moves the evictable entries of `shard` to `evicted` (to be destroyed
  // without the lock), and sets the next threshold.
  static void SweepLocked(Shard& shard, absl::Time now,
                          std::vector<Entry>& evicted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    for (auto it = shard.entries.begin(); it != shard.entries.end();) {
      if (Evictable(it->second, now)) {
        evicted.push_back(std::move(it->second));
        shard.entries.erase(it++);
      } else {
        ++it;
      }
    }
    shard.sweep_at = std::max(kMinSweepAt, 2 * shard.entries.size());
  }

  // See "Lifetime of a key's state" in registry.h. Called under the shard's
  // lock, which every copy of the entry's pointers is made under: a use
  // count of 1 cannot grow behind the sweep's back.
  static bool Evictable(Entry& entry, absl::Time now) {
    auto used = [](const auto& p) { return p != nullptr && p.use_count() > 1; };
    if (used(entry.breaker) || used(entry.budget) || used(entry.throttle) ||
        used(entry.adaptive)) {
      entry.last_used = now;
      return false;
    }
    if (entry.breaker != nullptr) {
      const BreakerSnapshot s = entry.breaker->Snapshot();
      const BreakerOptions& o = entry.breaker->options();
      switch (s.state) {
        case BreakerState::kClosed:
          if (s.window_attempts > 0) return false;
          break;
        case BreakerState::kOpen:
        case BreakerState::kHalfOpen:
          if (now - entry.last_used < o.max_open_time + o.healthy_period) {
            return false;
          }
          break;
        case BreakerState::kForcedOpen:
        case BreakerState::kDisabled:
          return false;
      }
    }
    if (entry.budget != nullptr) {
      const RetryBudgetSnapshot s = entry.budget->Snapshot();
      // A retry granted on credit still owes its settlement.
      if (s.first_attempts > 0 || s.retries > 0 || s.unpaid_in_flight > 0) {
        return false;
      }
    }
    if (entry.adaptive != nullptr && !entry.adaptive->Settled()) {
      return false;
    }
    return true;
  }

  std::array<Shard, kShards> shards;
};

absl::StatusOr<std::shared_ptr<BreakerRegistry>> BreakerRegistry::Create(
    const Options& options) {
  if (absl::Status s = options.breaker.Validate(); !s.ok()) return s;
  if (absl::Status s = options.budget.Validate(); !s.ok()) return s;
  return std::shared_ptr<BreakerRegistry>(new BreakerRegistry(options));
}

std::shared_ptr<BreakerRegistry> BreakerRegistry::Default() {
  static const auto* registry =
      new std::shared_ptr<BreakerRegistry>(new BreakerRegistry(Options{}));
  return *registry;
}

BreakerRegistry::BreakerRegistry(const Options& options)
    : options_(options),
      clock_(options.clock == nullptr ? Clock::Real() : options.clock),
      listeners_(std::make_shared<Listeners>()),
      impl_(std::make_unique<State>()) {}

BreakerRegistry::~BreakerRegistry() = default;

std::shared_ptr<CircuitBreaker> BreakerRegistry::NewBreaker(
    absl::string_view key, const BreakerOptions& options) {
  std::shared_ptr<Listeners> listeners = listeners_;
  // Cannot fail: the caller validated the options.
  return *CircuitBreaker::Create(
      std::string(key), options, clock_,
      [listeners](const BreakerTransition& t) { listeners->Notify(t); });
}

std::shared_ptr<CircuitBreaker> BreakerRegistry::Get(absl::string_view key) {
  return impl_->WithEntry(key, clock_->MonotonicNow(),
                          [&](State::Entry& entry) {
                            if (entry.breaker == nullptr) {
                              entry.breaker = NewBreaker(key, options_.breaker);
                            }
                            return entry.breaker;
                          });
}

absl::StatusOr<std::shared_ptr<CircuitBreaker>> BreakerRegistry::Get(
    absl::string_view key, const BreakerOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return impl_->WithEntry(
      key, clock_->MonotonicNow(),
      [&](State::Entry& entry)
          -> absl::StatusOr<std::shared_ptr<CircuitBreaker>> {
        if (entry.breaker == nullptr) {
          entry.breaker = NewBreaker(key, options);
        } else if (entry.breaker->options() != options) {
          return absl::FailedPreconditionError(
              absl::StrCat("circuit breaker \"", key,
                           "\" already exists with other options"));
        }
        return entry.breaker;
      });
}

std::shared_ptr<RetryBudget> BreakerRegistry::GetBudget(absl::string_view key) {
  return impl_->WithEntry(
      key, clock_->MonotonicNow(), [&](State::Entry& entry) {
        if (entry.budget == nullptr) {
          entry.budget = *RetryBudget::Create(options_.budget, clock_);
        }
        return entry.budget;
      });
}

absl::StatusOr<std::shared_ptr<RetryBudget>> BreakerRegistry::GetBudget(
    absl::string_view key, const RetryBudgetOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return impl_->WithEntry(
      key, clock_->MonotonicNow(),
      [&](State::Entry& entry) -> absl::StatusOr<std::shared_ptr<RetryBudget>> {
        if (entry.budget == nullptr) {
          entry.budget = *RetryBudget::Create(options, clock_);
        } else if (entry.budget->options() != options) {
          return absl::FailedPreconditionError(absl::StrCat(
              "retry budget \"", key, "\" already exists with other options"));
        }
        return entry.budget;
      });
}

absl::StatusOr<std::shared_ptr<RetryThrottle>> BreakerRegistry::GetThrottle(
    absl::string_view key, const RetryThrottleOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return impl_->WithEntry(
      key, clock_->MonotonicNow(), [&](State::Entry& entry) {
        if (entry.throttle == nullptr || entry.throttle->options() != options) {
          entry.throttle =
              *RetryThrottle::Create(options, entry.throttle.get());
        }
        return entry.throttle;
      });
}

absl::StatusOr<std::shared_ptr<AdaptiveThrottle>>
BreakerRegistry::GetAdaptiveThrottle(absl::string_view key,
                                     const AdaptiveThrottleOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return impl_->WithEntry(
      key, clock_->MonotonicNow(),
      [&](State::Entry& entry)
          -> absl::StatusOr<std::shared_ptr<AdaptiveThrottle>> {
        if (entry.adaptive == nullptr) {
          entry.adaptive =
              *AdaptiveThrottle::Create(options, clock_, options_.random);
        } else if (entry.adaptive->options() != options) {
          return absl::FailedPreconditionError(
              absl::StrCat("adaptive throttle \"", key,
                           "\" already exists with other options"));
        }
        return entry.adaptive;
      });
}

BreakerRegistry::ListenerId BreakerRegistry::AddTransitionListener(
    BreakerListener listener) {
  return listeners_->Add(std::move(listener));
}

BreakerRegistry::ListenerId BreakerRegistry::AddTransitionListener(
    absl::string_view key, BreakerListener listener) {
  return listeners_->Add(key, std::move(listener));
}

void BreakerRegistry::RemoveTransitionListener(ListenerId id) {
  listeners_->Remove(id);
}

size_t BreakerRegistry::listener_keys() const { return listeners_->keys(); }

std::vector<std::pair<std::string, std::shared_ptr<CircuitBreaker>>>
BreakerRegistry::Breakers() const {
  std::vector<std::pair<std::string, std::shared_ptr<CircuitBreaker>>> out;
  for (State::Shard& shard : impl_->shards) {
    internal::MutexLock lock(&shard.mu);
    for (const auto& [key, entry] : shard.entries) {
      if (entry.breaker != nullptr) out.emplace_back(key, entry.breaker);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

size_t BreakerRegistry::Sweep() {
  const absl::Time now = clock_->MonotonicNow();
  size_t n = 0;
  for (State::Shard& shard : impl_->shards) {
    std::vector<State::Entry> evicted;
    internal::MutexLock lock(&shard.mu);
    State::SweepLocked(shard, now, evicted);
    n += evicted.size();
  }
  return n;
}

size_t BreakerRegistry::size() const {
  size_t n = 0;
  for (State::Shard& shard : impl_->shards) {
    internal::MutexLock lock(&shard.mu);
    n += shard.entries.size();
  }
  return n;
}

}  // namespace rpcguard
