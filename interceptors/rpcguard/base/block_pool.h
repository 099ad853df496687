// Copyright rpcguard authors.
//
// internal::PoolAllocator<T>: an allocator for std::allocate_shared that
// keeps a few freed blocks of its size in a process-wide pool and hands them
// out again.
//
// Why: a call's blocks are taken on one thread and often freed on another.
// A sync call's state (HijackedCall, about 2.4 KB with its engine) is more
// than glibc's per-thread cache (tcache) serves, so its malloc and free went
// through the arena's large bins on every call; an attempt and its
// grpc::ClientContext are taken on the caller's thread and freed on the gRPC
// thread that ends them, so the caller's tcache never has one. Measured,
// these cost several hundred instructions of a call's no-failure path
// (issue 31, bench/RESULTS.md); a slot of the pool costs an atomic exchange.
//
// Bound: at most kSlots blocks of each size are kept, process-wide (a few
// tens of KB in all); a block freed when the pool is full goes back to the
// heap. The blocks kept are never returned (still reachable, not leaked).
// Under AddressSanitizer the pool is off, so that a use after free is still
// caught.
//
// Internal to rpcguard. Thread-safe, lock-free: each slot holds a block or
// nothing, and a block moves in or out of it by one atomic operation, so no
// block is ever handed out twice.

#ifndef RPCGUARD_BASE_BLOCK_POOL_H_
#define RPCGUARD_BASE_BLOCK_POOL_H_

#include <atomic>
#include <cstddef>
#include <new>

#include "absl/base/config.h"

namespace rpcguard {
namespace internal {

template <size_t kSize>
class BlockPool {
 public:
  static constexpr int kSlots = 16;
  // Whether freed blocks are kept (false under AddressSanitizer).
#ifdef ABSL_HAVE_ADDRESS_SANITIZER
  static constexpr bool kKeeps = false;
#else
  static constexpr bool kKeeps = true;
#endif

  static void* Take() {
    if (!kKeeps) return ::operator new(kSize);
    for (std::atomic<void*>& slot : slots_) {
      if (slot.load(std::memory_order_relaxed) == nullptr) continue;
      // Acquire: the block's last use, on the thread that gave it,
      // happens before this one.
      void* block = slot.exchange(nullptr, std::memory_order_acquire);
      if (block != nullptr) return block;
    }
    return ::operator new(kSize);
  }

  static void Give(void* block) {
    if (!kKeeps) {
      ::operator delete(block);
      return;
    }
    for (std::atomic<void*>& slot : slots_) {
      if (slot.load(std::memory_order_relaxed) != nullptr) continue;
      void* empty = nullptr;
      if (slot.compare_exchange_strong(empty, block, std::memory_order_release,
                                       std::memory_order_relaxed)) {
        return;
      }
    }
    ::operator delete(block);
  }

 private:
  static inline std::atomic<void*> slots_[kSlots] = {};
};

template <typename T>
class PoolAllocator {
 public:
  using value_type = T;

  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__,
                  "blocks come from ::operator new(size_t)");
    if (n != 1) return static_cast<T*>(::operator new(n * sizeof(T)));
    return static_cast<T*>(BlockPool<sizeof(T)>::Take());
  }

  void deallocate(T* p, size_t n) {
    if (n != 1) {
      ::operator delete(p);
      return;
    }
    BlockPool<sizeof(T)>::Give(p);
  }

  template <typename U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const PoolAllocator<U>&) const {
    return false;
  }
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_BASE_BLOCK_POOL_H_
