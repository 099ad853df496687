// Copyright rpcguard authors.
//
// One stream call of each shape through each stub API, made as an
// application makes it, and judged: for the streams family of
// //bench:compare (streams.cc), one caller, calls one after another.

#ifndef RPCGUARD_BENCH_COMPARE_STREAM_CALLS_H_
#define RPCGUARD_BENCH_COMPARE_STREAM_CALLS_H_

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "proto/rpcguard/testing/v1/streams.grpc.pb.h"

namespace rpcguard {
namespace bench {

// Bidi: kMessages requests, then as many echoes (Streams.Bidi).
enum class Shape { kServer, kClient, kBidi };
// The stub API: blocking, reactors, or a completion queue (CQ-async).
enum class Api { kSync, kCallback, kCq };

// "sync", "callback" or "cq".
const char* ApiName(Api api);

// Messages per stream: 1,000 small requests (about 7 KB on the wire) stay
// well inside both replay buffers (256 KiB), so a client stream that fails
// before its response can always be replayed.
inline constexpr int kMessages = 1000;
// Far beyond a stream's time on a loaded machine (tens of ms): a call that
// ends by its deadline is a failure of the client, not of the budget.
inline constexpr absl::Duration kStreamDeadline = absl::Seconds(2);

struct Outcome {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  // OK, but not the messages expected: a wrong result.
  bool wrong = false;
  // Replies read (server stream) or requests the server counted (client
  // stream).
  int got = 0;
  // Client stream, sync stub: requests whose Write() returned true (the
  // stub stops at the first false, as an application does).
  int written = -1;
};

// One call of `shape` through the `kind` stub API on `stub`, waited for on
// this thread (the callback API's reactors signal it; no thread of gRPC's
// ever blocks).
Outcome OneStreamCall(::rpcguard::testing::v1::Streams::Stub& stub, Shape shape,
                      Api kind);

}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_COMPARE_STREAM_CALLS_H_
