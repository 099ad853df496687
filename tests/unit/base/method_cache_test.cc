// Copyright rpcguard authors.

#include "rpcguard/base/method_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rpcguard {
namespace internal {
namespace {

struct Value {
  std::string path;
};

std::unique_ptr<Value> Make(absl::string_view path) {
  return std::make_unique<Value>(Value{std::string(path)});
}

TEST(MethodCacheTest, BuildsOncePerPathAndKeepsTheValue) {
  MethodCache<Value> cache;
  int built = 0;
  auto make = [&](absl::string_view path) {
    ++built;
    return Make(path);
  };
  const Value& a = cache.Get("/pkg.S/A", make);
  const Value& b = cache.Get("/pkg.S/B", make);
  EXPECT_EQ(a.path, "/pkg.S/A");
  EXPECT_EQ(b.path, "/pkg.S/B");
  EXPECT_EQ(&cache.Get("/pkg.S/A", make), &a);
  EXPECT_EQ(&cache.Get(std::string("/pkg.S/B"), make), &b);
  EXPECT_EQ(built, 2);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(MethodCacheTest, GrowsWithoutMovingValues) {
  MethodCache<Value> cache;
  std::vector<const Value*> first;
  for (int i = 0; i < 1000; ++i) {
    first.push_back(&cache.Get(absl::StrCat("/pkg.S/M", i), Make));
  }
  EXPECT_EQ(cache.size(), 1000u);
  for (int i = 0; i < 1000; ++i) {
    const Value& v = cache.Get(absl::StrCat("/pkg.S/M", i), [](auto) {
      ADD_FAILURE() << "built twice";
      return std::unique_ptr<Value>();
    });
    EXPECT_EQ(&v, first[i]);
    EXPECT_EQ(v.path, absl::StrCat("/pkg.S/M", i));
  }
}

// A builder may look up other methods (the cache's lock is not held).
TEST(MethodCacheTest, BuilderMayUseTheCache) {
  MethodCache<Value> cache;
  const Value& outer = cache.Get("/outer", [&](absl::string_view path) {
    EXPECT_EQ(cache.Get("/inner", Make).path, "/inner");
    return Make(path);
  });
  EXPECT_EQ(outer.path, "/outer");
  EXPECT_EQ(cache.size(), 2u);
}

// Readers and writers at once (run under ThreadSanitizer in CI): every
// thread gets the same value for a path, whatever it raced with.
TEST(MethodCacheTest, ConcurrentLookupsAgree) {
  MethodCache<Value> cache;
  constexpr int kThreads = 8;
  constexpr int kPaths = 300;
  std::vector<std::vector<const Value*>> seen(
      kThreads, std::vector<const Value*>(kPaths));
  std::atomic<int> built{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (int k = 0; k < kPaths; ++k) {
          // Each thread walks the paths from a different start.
          const int i = (k + t * 37) % kPaths;
          const Value& v =
              cache.Get(absl::StrCat("/pkg.S/M", i), [&](absl::string_view p) {
                built.fetch_add(1);
                return Make(p);
              });
          EXPECT_EQ(v.path, absl::StrCat("/pkg.S/M", i));
          if (round == 0) {
            seen[t][i] = &v;
          } else {
            EXPECT_EQ(seen[t][i], &v);
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(seen[t], seen[0]);
  EXPECT_EQ(cache.size(), static_cast<size_t>(kPaths));
  EXPECT_GE(built.load(), kPaths);  // a race may build a path twice
}

TEST(MethodCacheTest, GetCountedRefusesPastTheLimitAndBuildsNothing) {
  MethodCache<Value> cache;
  int built = 0;
  auto make = [&](absl::string_view path) {
    ++built;
    return Make(path);
  };
  for (int i = 0; i < 3; ++i) {
    const Value* v = cache.GetCounted(absl::StrCat("/x.S/U", i), 3, make);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->path, absl::StrCat("/x.S/U", i));
  }
  EXPECT_EQ(cache.GetCounted("/x.S/U3", 3, make), nullptr);
  EXPECT_EQ(built, 3);
  EXPECT_EQ(cache.Find("/x.S/U3"), nullptr);
  // A path held already is found, not refused.
  EXPECT_EQ(cache.GetCounted("/x.S/U1", 3, make), cache.Find("/x.S/U1"));
  EXPECT_EQ(cache.counted(), 3u);
  EXPECT_EQ(built, 3);
}

// Declared methods (Get) never count against the limit, and are never
// refused, however many undeclared ones came first.
TEST(MethodCacheTest, NamedPathsAlwaysGetTheirOwn) {
  MethodCache<Value> cache;
  for (int i = 0; i < 5; ++i) {
    cache.GetCounted(absl::StrCat("/x.S/U", i), 2, Make);
  }
  EXPECT_EQ(cache.counted(), 2u);
  for (int i = 0; i < 50; ++i) {
    const std::string path = absl::StrCat("/pkg.S/Named", i);
    EXPECT_EQ(cache.Get(path, Make).path, path);
  }
  EXPECT_EQ(cache.counted(), 2u);
  EXPECT_EQ(cache.size(), 52u);
  // And the limit still holds for undeclared ones.
  EXPECT_EQ(cache.GetCounted("/x.S/Late", 2, Make), nullptr);
}

TEST(SharedMemoTest, RemembersAndEvicts) {
  SharedMemo<Value> memo(16);
  const Value a{"a"};
  const Value b{"b"};
  EXPECT_EQ(memo.Find("/x.S/U1"), nullptr);  // nothing allocated yet
  memo.Store("/x.S/U1", &a);
  memo.Store("/x.S/U2", &b);
  // Each path is found with its own value, unless the second evicted it.
  const Value* one = memo.Find("/x.S/U1");
  EXPECT_TRUE(one == &a || one == nullptr);
  EXPECT_EQ(memo.Find("/x.S/U2"), &b);
  EXPECT_EQ(memo.Find("/x.S/Never"), nullptr);
  // Many paths through 16 slots: the memo never answers with a value
  // stored for another path.
  std::vector<Value> values(200);
  for (int i = 0; i < 200; ++i) {
    values[i].path = absl::StrCat("/x.S/M", i);
    memo.Store(values[i].path, &values[i]);
  }
  int found = 0;
  for (int i = 0; i < 200; ++i) {
    const Value* v = memo.Find(values[i].path);
    if (v == nullptr) continue;
    ++found;
    EXPECT_EQ(v, &values[i]);
  }
  EXPECT_GT(found, 0);
  EXPECT_LE(found, 16);
}

// The bound under contention (run under ThreadSanitizer in CI): threads
// racing over more undeclared paths than the limit keep exactly the limit,
// every refused path is served from the memo's shared value, and declared
// paths all get their own.
TEST(MethodCacheTest, ConcurrentBoundedLookupsKeepTheLimit) {
  MethodCache<Value> cache;
  SharedMemo<Value> memo(64);
  const Value shared{"other"};
  constexpr size_t kLimit = 40;
  constexpr int kThreads = 6;
  constexpr int kPaths = 400;
  std::atomic<int> built{0};
  std::atomic<int> refused{0};
  auto make = [&](absl::string_view p) {
    built.fetch_add(1);
    return Make(p);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 2; ++round) {
        for (int k = 0; k < kPaths; ++k) {
          const int i = (k + t * 53) % kPaths;
          const std::string path = absl::StrCat("/x.S/U", i);
          const Value* v = cache.Find(path);
          if (v == nullptr) v = memo.Find(path);
          if (v == nullptr) v = cache.GetCounted(path, kLimit, make);
          if (v == nullptr) {
            refused.fetch_add(1);
            memo.Store(path, &shared);
            v = &shared;
          }
          EXPECT_TRUE(v == &shared || v->path == path) << path;
          if (i % 20 == 0) {
            const std::string named = absl::StrCat("/pkg.S/N", i);
            EXPECT_EQ(cache.Get(named, make).path, named);
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(cache.counted(), kLimit);
  EXPECT_EQ(cache.size(), kLimit + kPaths / 20);
  EXPECT_GT(refused.load(), 0);
  // Builds: the limit, the named paths, and races on a path (both build).
  EXPECT_GE(built.load(), static_cast<int>(kLimit + kPaths / 20));
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
