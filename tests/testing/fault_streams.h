// Copyright rpcguard authors.
//
// FaultStreams: the rpcguard.testing.v1.Streams service
// (proto/rpcguard/testing/v1/streams.proto) as FaultServer serves it, beside
// FaultService, for the stream benchmarks (//bench:compare, family
// "streams"). Its one fault: a share of attempts fails with UNAVAILABLE
// before any response (nothing read, nothing written), each attempt drawn
// from a seeded generator, so that a run that repeats its calls one at a
// time repeats its failures exactly. FaultControl.Control sets the share and
// the seed; FaultControl.Stats reports the attempts.
//
// ServerStream replies `n` times (reply.n = 0..n-1); ClientStream reads
// every request, then replies once with n the number of requests; Bidi
// reads every request, then echoes each (reply.n = request.n), in order.
// UnsafeBidi is not served (UNIMPLEMENTED).
//
// Thread-safety: every method may be called from any thread.

#ifndef RPCGUARD_TESTS_TESTING_FAULT_STREAMS_H_
#define RPCGUARD_TESTS_TESTING_FAULT_STREAMS_H_

#include <cstdint>
#include <random>

#include "absl/synchronization/mutex.h"
#include "proto/rpcguard/testing/v1/streams.grpc.pb.h"

namespace rpcguard {
namespace testing {

class FaultStreams final
    : public rpcguard::testing::v1::Streams::CallbackService {
 public:
  // From now on, fails `fail_percent` (0-100) of attempts, drawn from a
  // generator seeded with `seed`.
  void SetFaults(int fail_percent, uint64_t seed) ABSL_LOCKS_EXCLUDED(mu_);

  // Attempts received so far, by every method.
  int64_t attempts() const ABSL_LOCKS_EXCLUDED(mu_);

  grpc::ServerWriteReactor<rpcguard::testing::v1::StreamReply>* ServerStream(
      grpc::CallbackServerContext* ctx,
      const rpcguard::testing::v1::StreamRequest* req) override;
  grpc::ServerReadReactor<rpcguard::testing::v1::StreamRequest>* ClientStream(
      grpc::CallbackServerContext* ctx,
      rpcguard::testing::v1::StreamReply* reply) override;
  grpc::ServerBidiReactor<rpcguard::testing::v1::StreamRequest,
                          rpcguard::testing::v1::StreamReply>*
  Bidi(grpc::CallbackServerContext* ctx) override;

 private:
  // Counts the attempt; true when it is to fail.
  bool Arrive() ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  int fail_percent_ ABSL_GUARDED_BY(mu_) = 0;
  // std::mt19937_64's sequence is fixed by the standard: the same seed
  // draws the same failures with any library.
  std::mt19937_64 gen_ ABSL_GUARDED_BY(mu_);
  int64_t attempts_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace testing
}  // namespace rpcguard

#endif  // RPCGUARD_TESTS_TESTING_FAULT_STREAMS_H_
