// Copyright rpcguard authors.

#include "rpcguard/base/block_pool.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace rpcguard {
namespace internal {
namespace {

// Each test uses a size of its own, so that it has a pool of its own.
template <int kTag>
struct Payload {
  char bytes[256 + 8 * kTag];
  int owner = -1;
};

TEST(BlockPoolTest, FreedBlocksAreHandedOutAgainUpToTheBound) {
  using Pool = BlockPool<sizeof(Payload<1>)>;
  std::vector<void*> given;
  for (int i = 0; i < Pool::kSlots + 4; ++i) {
    given.push_back(::operator new(sizeof(Payload<1>)));
  }
  for (void* block : given) Pool::Give(block);  // the last 4 go to the heap
  std::set<void*> kept(given.begin(), given.begin() + Pool::kSlots);
  std::set<void*> taken;
  for (int i = 0; i < Pool::kSlots; ++i) taken.insert(Pool::Take());
  if (Pool::kKeeps) {
    EXPECT_EQ(taken, kept);
  } else {
    // Under ASan every block goes back to the heap, which quarantines it:
    // none is handed out again, so a use after free is still reported.
    for (void* block : taken) EXPECT_EQ(kept.count(block), 0u);
  }
  // Empty now: a new block from the heap.
  void* fresh = Pool::Take();
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(kept.count(fresh), 0u);
  ::operator delete(fresh);
  for (void* block : taken) ::operator delete(block);
}

TEST(BlockPoolTest, SharedPointersReuseTheirBlocks) {
  auto first = std::allocate_shared<Payload<2>>(PoolAllocator<Payload<2>>());
  const void* block = first.get();
  first.reset();
  auto second = std::allocate_shared<Payload<2>>(PoolAllocator<Payload<2>>());
  // Reused when the pool keeps blocks; under ASan the freed one is
  // quarantined and a new one comes from the heap.
  EXPECT_EQ(static_cast<const void*>(second.get()) == block,
            BlockPool<sizeof(Payload<2>)>::kKeeps);
  EXPECT_EQ(second->owner, -1);  // constructed afresh
}

// Blocks taken on some threads and freed on others are never held by two
// owners at once (TSan checks the hand-over too).
TEST(BlockPoolTest, NoBlockHasTwoOwnersAcrossThreads) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 2000;
  using Item = Payload<3>;
  std::atomic<int> clashes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &clashes] {
      std::vector<std::shared_ptr<Item>> held;
      for (int i = 0; i < kRounds; ++i) {
        auto item = std::allocate_shared<Item>(PoolAllocator<Item>());
        item->owner = t;
        std::memset(item->bytes, t, sizeof(item->bytes));
        held.push_back(std::move(item));
        if (held.size() > 3) {
          for (const auto& h : held) {
            if (h->owner != t || h->bytes[sizeof(h->bytes) - 1] != t) {
              clashes.fetch_add(1);
            }
          }
          held.clear();
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(clashes.load(), 0);
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
