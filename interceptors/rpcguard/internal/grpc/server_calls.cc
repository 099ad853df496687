// Copyright rpcguard authors.

#include "rpcguard/internal/grpc/server_calls.h"

#include <array>
#include <atomic>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "rpcguard/base/mutex.h"

namespace rpcguard {
namespace internal {

namespace {

struct Entry {
  uint64_t serial = 0;
  Marks marked;
};

constexpr size_t kShards = 16;

std::atomic<uint64_t> g_stops_sent[kNumGiveUpReasons];
std::atomic<uint64_t> g_hedges_suppressed{0};

}  // namespace

void Marks::Add(GiveUpReason reason) {
  const ReasonBits bit = ReasonBit(reason);
  if (reason == GiveUpReason::kNone || (reasons & bit) != 0) return;
  reasons |= bit;
  order[count++] = static_cast<uint8_t>(reason);
}

GiveUpReason Marks::First(ReasonBits among) const {
  for (uint8_t i = 0; i < count; ++i) {
    const GiveUpReason r = static_cast<GiveUpReason>(order[i]);
    if ((among & ReasonBit(r)) != 0) return r;
  }
  return GiveUpReason::kNone;
}

struct ServerCalls::Shard {
  Mutex mu;
  absl::flat_hash_map<grpc_call*, Entry> entries ABSL_GUARDED_BY(mu);
};

ServerCalls& ServerCalls::Get() {
  static ServerCalls* const calls = new ServerCalls();
  return *calls;
}

ServerCalls::Shard& ServerCalls::ShardOf(grpc_call* call) {
  static std::array<Shard, kShards>* const shards =
      new std::array<Shard, kShards>();
  // Calls are allocated on 8-byte or coarser boundaries.
  return (*shards)[(reinterpret_cast<uintptr_t>(call) >> 4) % kShards];
}

uint64_t ServerCalls::Begin(grpc_call* call, bool no_hedge) {
  static std::atomic<uint64_t> next_serial{1};
  // The low bit carries no_hedge, so that a link needs no second lookup.
  const uint64_t serial =
      (next_serial.fetch_add(1, std::memory_order_relaxed) << 1) |
      (no_hedge ? 1 : 0);
  Shard& shard = ShardOf(call);
  MutexLock lock(&shard.mu);
  // A stale entry at this address (its call's end was not seen) is replaced.
  shard.entries[call] = Entry{serial, Marks()};
  return serial;
}

void ServerCalls::End(grpc_call* call, uint64_t serial) {
  Shard& shard = ShardOf(call);
  MutexLock lock(&shard.mu);
  auto it = shard.entries.find(call);
  if (it != shard.entries.end() && it->second.serial == serial) {
    shard.entries.erase(it);
  }
}

ServerCallLink ServerCalls::Find(grpc_call* call) {
  ServerCallLink link;
  if (call == nullptr) return link;
  Shard& shard = ShardOf(call);
  MutexLock lock(&shard.mu);
  auto it = shard.entries.find(call);
  if (it == shard.entries.end()) return link;
  link.call = call;
  link.serial = it->second.serial;
  link.no_hedge = (link.serial & 1) != 0;
  return link;
}

void ServerCalls::Mark(const ServerCallLink& link, GiveUpReason reason) {
  if (!link.linked() || reason == GiveUpReason::kNone) return;
  Shard& shard = ShardOf(link.call);
  MutexLock lock(&shard.mu);
  auto it = shard.entries.find(link.call);
  if (it != shard.entries.end() && it->second.serial == link.serial) {
    // Under the shard's lock: of two children giving up at once, the one
    // that takes it first is first.
    it->second.marked.Add(reason);
  }
}

Marks ServerCalls::Marked(grpc_call* call, uint64_t serial) {
  Shard& shard = ShardOf(call);
  MutexLock lock(&shard.mu);
  auto it = shard.entries.find(call);
  if (it == shard.entries.end() || it->second.serial != serial) return Marks();
  return it->second.marked;
}

size_t ServerCalls::size() {
  size_t n = 0;
  for (size_t i = 0; i < kShards; ++i) {
    // Any address of shard i: (i << 4).
    Shard& shard = ShardOf(reinterpret_cast<grpc_call*>(i << 4));
    MutexLock lock(&shard.mu);
    n += shard.entries.size();
  }
  return n;
}

std::string EncodeLink(const ServerCallLink& link) {
  return absl::StrCat(absl::Hex(reinterpret_cast<uintptr_t>(link.call)), ".",
                      link.serial);
}

ServerCallLink DecodeLink(absl::string_view value) {
  ServerCallLink link;
  std::pair<absl::string_view, absl::string_view> parts =
      absl::StrSplit(value, absl::MaxSplits('.', 1));
  uint64_t address = 0;
  uint64_t serial = 0;
  if (!absl::SimpleHexAtoi(parts.first, &address) ||
      !absl::SimpleAtoi(parts.second, &serial) || address == 0 || serial == 0) {
    return link;
  }
  link.call = reinterpret_cast<grpc_call*>(static_cast<uintptr_t>(address));
  link.serial = serial;
  link.no_hedge = (serial & 1) != 0;
  return link;
}

GiveUpReason TravellingReason(GiveUpReason reason, int attempts) {
  if (reason == GiveUpReason::kMaxAttempts && attempts <= 1) {
    return GiveUpReason::kNone;
  }
  return reason;
}

void CountStopSent(GiveUpReason reason) {
  const int i = static_cast<int>(reason);
  if (i >= 0 && i < kNumGiveUpReasons) {
    g_stops_sent[i].fetch_add(1, std::memory_order_relaxed);
  }
}

void CountHedgeSuppressed() {
  g_hedges_suppressed.fetch_add(1, std::memory_order_relaxed);
}

void ReadServerCounters(uint64_t* stops, uint64_t* hedges) {
  for (int i = 0; i < kNumGiveUpReasons; ++i) {
    stops[i] = g_stops_sent[i].load(std::memory_order_relaxed);
  }
  *hedges = g_hedges_suppressed.load(std::memory_order_relaxed);
}

}  // namespace internal
}  // namespace rpcguard
