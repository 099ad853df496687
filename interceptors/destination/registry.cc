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
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "rpcguard/internal/mutex.h"

namespace rpcguard {

// The registry's listeners, shared with its breakers (which may outlive it).
// Copy-on-write: Notify takes the lock only to copy a pointer, and calls the
// listeners without it.
class BreakerRegistry::Listeners {
 public:
  ListenerId Add(BreakerListener listener) {
    internal::MutexLock lock(&mu_);
    auto next = std::make_shared<List>(*list_);
    const ListenerId id = next_id_++;
    next->emplace_back(id, std::move(listener));
    list_ = std::move(next);
    return id;
  }

  void Remove(ListenerId id) {
    internal::MutexLock lock(&mu_);
    auto next = std::make_shared<List>(*list_);
    next->erase(std::remove_if(next->begin(), next->end(),
                               [id](const auto& l) { return l.first == id; }),
                next->end());
    list_ = std::move(next);
  }

  void Notify(const BreakerTransition& transition) {
    std::shared_ptr<const List> list;
    {
      internal::MutexLock lock(&mu_);
      list = list_;
    }
    for (const auto& l : *list) l.second(transition);
  }

 private:
  using List = std::vector<std::pair<ListenerId, BreakerListener>>;
  internal::Mutex mu_;
  std::shared_ptr<const List> list_ ABSL_GUARDED_BY(mu_) =
      std::make_shared<const List>();
  ListenerId next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

struct BreakerRegistry::State {
  struct Entry {
    std::shared_ptr<CircuitBreaker> breaker;
    std::shared_ptr<RetryBudget> budget;
    std::shared_ptr<RetryThrottle> throttle;
  };
  struct Shard {
    internal::Mutex mu;
    absl::flat_hash_map<std::string, Entry> entries ABSL_GUARDED_BY(mu);
  };
  static constexpr size_t kShards = 16;

  Shard& ShardFor(absl::string_view key) {
    return shards[absl::Hash<absl::string_view>{}(key) % kShards];
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
  State::Shard& shard = impl_->ShardFor(key);
  internal::MutexLock lock(&shard.mu);
  State::Entry& entry = shard.entries[key];
  if (entry.breaker == nullptr)
    entry.breaker = NewBreaker(key, options_.breaker);
  return entry.breaker;
}

absl::StatusOr<std::shared_ptr<CircuitBreaker>> BreakerRegistry::Get(
    absl::string_view key, const BreakerOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  State::Shard& shard = impl_->ShardFor(key);
  internal::MutexLock lock(&shard.mu);
  State::Entry& entry = shard.entries[key];
  if (entry.breaker == nullptr) {
    entry.breaker = NewBreaker(key, options);
  } else if (entry.breaker->options() != options) {
    return absl::FailedPreconditionError(absl::StrCat(
        "circuit breaker \"", key, "\" already exists with other options"));
  }
  return entry.breaker;
}

std::shared_ptr<RetryBudget> BreakerRegistry::GetBudget(absl::string_view key) {
  State::Shard& shard = impl_->ShardFor(key);
  internal::MutexLock lock(&shard.mu);
  State::Entry& entry = shard.entries[key];
  if (entry.budget == nullptr) {
    entry.budget = *RetryBudget::Create(options_.budget, clock_);
  }
  return entry.budget;
}

absl::StatusOr<std::shared_ptr<RetryBudget>> BreakerRegistry::GetBudget(
    absl::string_view key, const RetryBudgetOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  State::Shard& shard = impl_->ShardFor(key);
  internal::MutexLock lock(&shard.mu);
  State::Entry& entry = shard.entries[key];
  if (entry.budget == nullptr) {
    entry.budget = *RetryBudget::Create(options, clock_);
  } else if (entry.budget->options() != options) {
    return absl::FailedPreconditionError(absl::StrCat(
        "retry budget \"", key, "\" already exists with other options"));
  }
  return entry.budget;
}

absl::StatusOr<std::shared_ptr<RetryThrottle>> BreakerRegistry::GetThrottle(
    absl::string_view key, const RetryThrottleOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  State::Shard& shard = impl_->ShardFor(key);
  internal::MutexLock lock(&shard.mu);
  State::Entry& entry = shard.entries[key];
  if (entry.throttle == nullptr || entry.throttle->options() != options) {
    entry.throttle = *RetryThrottle::Create(options, entry.throttle.get());
  }
  return entry.throttle;
}

BreakerRegistry::ListenerId BreakerRegistry::AddTransitionListener(
    BreakerListener listener) {
  return listeners_->Add(std::move(listener));
}

void BreakerRegistry::RemoveTransitionListener(ListenerId id) {
  listeners_->Remove(id);
}

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

}  // namespace rpcguard
