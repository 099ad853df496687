// Copyright rpcguard authors.
//
// FinalOutcome: a decided call, as an immutable value the engine writes
// once (call_engine.h) and the glue delivers into the application's batches
// (internal/grpc/final_outcome.h). Written once when the call is decided and
// never changed after, so any thread may read it without a lock.

#ifndef RPCGUARD_INTERNAL_ENGINE_OUTCOME_H_
#define RPCGUARD_INTERNAL_ENGINE_OUTCOME_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/interceptor.h>
#include <grpcpp/support/status.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "rpcguard/observability/trace.h"

namespace rpcguard {
namespace internal {

// Metadata copied out of an attempt, as strings that outlive it.
using Metadata = std::vector<std::pair<std::string, std::string>>;

// A call's parked batches: one or two for every unary API.
using Batches =
    absl::InlinedVector<grpc::experimental::InterceptorBatchMethods*, 2>;

struct FinalOutcome {
  grpc::Status status;  // as the caller gets it, annotated
  // The application's own call carried the final attempt: its response and
  // metadata are already where the application reads them.
  bool from_app_call = false;
  grpc::ByteBuffer response;  // serialized; copied (by reference) to parse
  Metadata initial_metadata;
  Metadata trailing_metadata;
  std::string attempts_text;  // the rpcguard-attempts trailer
  int attempts = 0;
  // The terminal trace event; its time, call id and strings are written
  // once, when the call concludes (batch fills never read it).
  TraceEvent terminal;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_ENGINE_OUTCOME_H_
