// Copyright rpcguard authors.
//
// ServerCalls: the server calls of this process that run under rpcguard's
// server interceptor (server.h), so that a give-up of an outgoing call made
// for one of them can mark it. Keyed by the server call's grpc_call*.
//
// Bounded by the server calls running now: an entry is created only when a
// call starts (ServerInterceptor, at its first hook) and erased when it ends;
// nothing else creates one. Each entry has a serial number, taken by the
// outgoing calls when they start: a give-up that arrives after its server
// call ended, when the grpc_call's memory may hold another call, finds no
// entry or another serial, and marks nothing.
//
// Thread-safe: 16 shards, each a mutex held for one hash operation.

#ifndef RPCGUARD_INTERNAL_GRPC_SERVER_CALLS_H_
#define RPCGUARD_INTERNAL_GRPC_SERVER_CALLS_H_

#include <grpc/grpc.h>

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "rpcguard/decision/give_up_reason.h"

namespace rpcguard {
namespace internal {

// An outgoing call's link to the server call it was made for.
struct ServerCallLink {
  grpc_call* call = nullptr;
  uint64_t serial = 0;
  // The server call is a retry or hedge of its caller's (attempt >= 2).
  bool no_hedge = false;

  bool linked() const { return call != nullptr; }
};

// The private metadata that LinkToServerCall puts on a ClientContext and the
// interceptor takes out before anything is sent.
inline constexpr char kServerCallLinkHeader[] = "rpcguard-server-call";
std::string EncodeLink(const ServerCallLink& link);
// An unlinked ServerCallLink for a malformed value.
ServerCallLink DecodeLink(absl::string_view value);

// The give-up reasons as bits (1 << reason).
using ReasonBits = uint64_t;
static_assert(kNumGiveUpReasons <= 64, "ReasonBits holds every reason");
inline constexpr ReasonBits ReasonBit(GiveUpReason r) {
  return ReasonBits{1} << static_cast<int>(r);
}

// The give-up reasons marked on one server call, in the order its outgoing
// calls gave up: the first one names the failure (server.h).
struct Marks {
  ReasonBits reasons = 0;
  // Each reason of `reasons` once, the first marked first; `count` of them.
  uint8_t order[kNumGiveUpReasons] = {};
  uint8_t count = 0;

  // Adds `reason` (not kNone) after those already marked, if it is not one.
  void Add(GiveUpReason reason);
  // The first reason marked that is in `among`, or kNone.
  GiveUpReason First(ReasonBits among) const;
};

class ServerCalls {
 public:
  // The process's one registry.
  static ServerCalls& Get();

  // A server call starts: returns its entry's serial.
  uint64_t Begin(grpc_call* call, bool no_hedge);
  // It ends: erases its entry, if it is still the one of `serial`.
  void End(grpc_call* call, uint64_t serial);
  // The link to `call` for an outgoing call: unlinked when `call` runs under
  // no rpcguard server interceptor (or has ended).
  ServerCallLink Find(grpc_call* call);
  // An outgoing call linked by `link` gave up for `reason`: marks the
  // server call, if it still runs (never creates an entry).
  void Mark(const ServerCallLink& link, GiveUpReason reason);
  // The reasons marked on the entry of `call` and `serial` (none if it has
  // no entry).
  Marks Marked(grpc_call* call, uint64_t serial);
  // Entries held now, for tests.
  size_t size();

 private:
  ServerCalls() = default;
  struct Shard;
  Shard& ShardOf(grpc_call* call);
};

// What an outgoing call's give-up means for its server call: `reason`, or
// kNone when it should not travel (max_attempts after a single attempt:
// nothing was retried, so the tier above may).
GiveUpReason TravellingReason(GiveUpReason reason, int attempts);

// Server-side counters (server.h, ServerSignals).
void CountStopSent(GiveUpReason reason);
void CountHedgeSuppressed();
// Reads them: `stops` has kNumGiveUpReasons entries.
void ReadServerCounters(uint64_t* stops, uint64_t* hedges);

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_SERVER_CALLS_H_
