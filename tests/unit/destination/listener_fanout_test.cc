// Copyright rpcguard authors.
//
// The registry's keyed transition listeners (issue 24): a transition of key
// K calls K's listeners and no other key's, however many there are; removal
// works and leaves no entry behind; every listener hears a transition before
// any hears the breaker's next. No gRPC threads: runs under TSan.

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpcguard/destination/breaker.h"
#include "rpcguard/destination/registry.h"

namespace rpcguard {
namespace {

using ::testing::ElementsAre;

constexpr int kKeys = 1000;

std::shared_ptr<BreakerRegistry> Make() {
  return *BreakerRegistry::Create(BreakerRegistry::Options{});
}

std::string Key(int i) { return absl::StrCat("dns:///host-", i, ":443"); }

TEST(ListenerFanoutTest, ATransitionCallsOnlyItsKeysListeners) {
  auto registry = Make();
  std::vector<int> calls(kKeys, 0);
  for (int i = 0; i < kKeys; ++i) {
    registry->AddTransitionListener(
        Key(i), [&calls, i](const BreakerTransition&) { ++calls[i]; });
  }
  EXPECT_EQ(registry->listener_keys(), static_cast<size_t>(kKeys));
  registry->Get(Key(7))->ForceOpen();
  registry->Get(Key(7))->Reset();
  registry->Get(Key(999))->ForceOpen();
  for (int i = 0; i < kKeys; ++i) {
    const int want = i == 7 ? 2 : i == 999 ? 1 : 0;
    EXPECT_EQ(calls[i], want) << Key(i);
  }
  // A key nobody listens to calls nobody.
  registry->Get("dns:///unheard:443")->ForceOpen();
  int total = 0;
  for (int c : calls) total += c;
  EXPECT_EQ(total, 3);
}

// The figure of issue 24: listener calls per transition with one listener
// per destination, registered for every key (as each factory's was before)
// versus for its own key.
TEST(ListenerFanoutTest, ListenerCallsPerTransitionWithAThousandListeners) {
  std::atomic<int> all_keys_calls{0};
  std::atomic<int> keyed_calls{0};
  {
    auto registry = Make();
    for (int i = 0; i < kKeys; ++i) {
      registry->AddTransitionListener(
          [&all_keys_calls](const BreakerTransition&) {
            all_keys_calls.fetch_add(1, std::memory_order_relaxed);
          });
    }
    registry->Get(Key(42))->ForceOpen();
  }
  {
    auto registry = Make();
    for (int i = 0; i < kKeys; ++i) {
      registry->AddTransitionListener(
          Key(i), [&keyed_calls](const BreakerTransition&) {
            keyed_calls.fetch_add(1, std::memory_order_relaxed);
          });
    }
    registry->Get(Key(42))->ForceOpen();
  }
  std::printf(
      "listener calls per transition, %d listeners on distinct keys: "
      "all-keys (before) %d, keyed (after) %d\n",
      kKeys, all_keys_calls.load(), keyed_calls.load());
  EXPECT_EQ(all_keys_calls.load(), kKeys);
  EXPECT_EQ(keyed_calls.load(), 1);
}

// A destination's listener hears its per-service keys too, and nothing that
// merely starts with the same text.
TEST(ListenerFanoutTest, AKeysListenerHearsItsPerServiceKeys) {
  auto registry = Make();
  std::vector<std::string> seen;
  registry->AddTransitionListener(
      "dns:///d:443",
      [&](const BreakerTransition& t) { seen.push_back(t.key); });
  for (const char* key :
       {"dns:///d:443", "dns:///d:443/pkg.Svc", "dns:///d:4430",
        "dns:///d:443x/pkg.Svc", "dns:///d:44", "dns:///"}) {
    registry->Get(key)->ForceOpen();
  }
  EXPECT_THAT(seen, ElementsAre("dns:///d:443", "dns:///d:443/pkg.Svc"));
}

TEST(ListenerFanoutTest, AllKeysListenersComeFirstThenTheKeysInOrder) {
  auto registry = Make();
  std::vector<std::string> seen;
  registry->AddTransitionListener(
      "k", [&](const BreakerTransition&) { seen.push_back("k1"); });
  registry->AddTransitionListener(
      [&](const BreakerTransition&) { seen.push_back("all"); });
  registry->AddTransitionListener(
      "k", [&](const BreakerTransition&) { seen.push_back("k2"); });
  registry->AddTransitionListener(
      "other", [&](const BreakerTransition&) { seen.push_back("other"); });
  registry->AddTransitionListener(
      "k/svc", [&](const BreakerTransition&) { seen.push_back("k/svc"); });
  registry->Get("k")->ForceOpen();
  EXPECT_THAT(seen, ElementsAre("all", "k1", "k2"));
  // A per-service key: the destination's listeners, then its own.
  seen.clear();
  registry->Get("k/svc")->ForceOpen();
  EXPECT_THAT(seen, ElementsAre("all", "k1", "k2", "k/svc"));
}

TEST(ListenerFanoutTest, RemovalStopsCallsAndDropsTheKeyWithItsLastListener) {
  auto registry = Make();
  int a = 0;
  int b = 0;
  const auto id_a = registry->AddTransitionListener(
      "k", [&](const BreakerTransition&) { ++a; });
  const auto id_b = registry->AddTransitionListener(
      "k", [&](const BreakerTransition&) { ++b; });
  auto breaker = registry->Get("k");
  breaker->ForceOpen();
  registry->RemoveTransitionListener(id_a);
  EXPECT_EQ(registry->listener_keys(), 1u);  // b still listens
  breaker->Reset();
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
  registry->RemoveTransitionListener(id_b);
  EXPECT_EQ(registry->listener_keys(), 0u);
  breaker->ForceOpen();
  EXPECT_EQ(b, 2);
  // Unknown and repeated ids are ignored.
  registry->RemoveTransitionListener(id_b);
  registry->RemoveTransitionListener(123456);
  EXPECT_EQ(registry->listener_keys(), 0u);
}

// Callers choose the keys (destinations): adding and removing listeners for
// ever more keys must not grow the registry.
TEST(ListenerFanoutTest, ManyKeysComeAndGoLeavingNothing) {
  auto registry = Make();
  for (int round = 0; round < 10; ++round) {
    std::vector<BreakerRegistry::ListenerId> ids;
    for (int i = 0; i < kKeys; ++i) {
      ids.push_back(registry->AddTransitionListener(
          Key(round * kKeys + i), [](const BreakerTransition&) {}));
    }
    EXPECT_EQ(registry->listener_keys(), static_cast<size_t>(kKeys));
    for (auto id : ids) registry->RemoveTransitionListener(id);
    EXPECT_EQ(registry->listener_keys(), 0u);
  }
}

// A listener for a key whose breaker does not exist yet, or is evicted and
// created again, hears it.
TEST(ListenerFanoutTest, KeyedListenersOutliveTheBreaker) {
  auto registry = Make();
  std::vector<uint64_t> sequences;
  registry->AddTransitionListener("k", [&](const BreakerTransition& t) {
    sequences.push_back(t.sequence);
  });
  registry->Get("k")->ForceOpen();
  registry->Get("k")->Reset();
  ASSERT_EQ(registry->Sweep(), 1u);
  registry->Get("k")->ForceOpen();
  EXPECT_THAT(sequences, ElementsAre(1u, 2u, 1u));
}

// Listeners run with no registry lock held: one may add and remove
// listeners, its own included, without deadlocking.
TEST(ListenerFanoutTest, AListenerMayRemoveItselfAndAddOthers) {
  auto registry = Make();
  BreakerRegistry::ListenerId self = 0;
  int calls = 0;
  int added_calls = 0;
  self = registry->AddTransitionListener("k", [&](const BreakerTransition&) {
    ++calls;
    registry->RemoveTransitionListener(self);
    registry->AddTransitionListener(
        "k", [&](const BreakerTransition&) { ++added_calls; });
  });
  auto breaker = registry->Get("k");
  breaker->ForceOpen();
  breaker->Reset();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(added_calls, 1);  // added during the first, heard the second
}

// Threads flip one shared breaker while listeners of its key and of other
// keys are registered: its listeners hear each transition, and every one of
// them hears transition n before any hears n + 1; the others hear nothing.
TEST(ListenerFanoutTest, EveryListenerHearsATransitionBeforeAnyHearsTheNext) {
  auto registry = Make();
  constexpr int kListeners = 8;
  absl::Mutex mu;
  std::vector<uint64_t> log;  // the sequence each call saw, in call order
  int others = 0;
  for (int i = 0; i < kListeners; ++i) {
    registry->AddTransitionListener("shared", [&](const BreakerTransition& t) {
      absl::MutexLock lock(&mu);
      log.push_back(t.sequence);
    });
    registry->AddTransitionListener(Key(i), [&](const BreakerTransition&) {
      absl::MutexLock lock(&mu);
      ++others;
    });
  }
  auto breaker = registry->Get("shared");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        if ((i + t) % 2 == 0) {
          breaker->ForceOpen();
        } else {
          breaker->Reset();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(others, 0);
  ASSERT_FALSE(log.empty());
  ASSERT_EQ(log.size() % kListeners, 0u);
  // Groups of kListeners calls, one group per transition: sequence 1, 2...
  for (size_t i = 0; i < log.size(); ++i) {
    ASSERT_EQ(log[i], i / kListeners + 1) << "call " << i;
  }
}

}  // namespace
}  // namespace rpcguard
