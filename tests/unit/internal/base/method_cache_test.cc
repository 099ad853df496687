// Copyright rpcguard authors.

#include "rpcguard/internal/base/method_cache.h"

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

}  // namespace
}  // namespace internal
}  // namespace rpcguard
