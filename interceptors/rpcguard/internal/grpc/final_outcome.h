// Copyright rpcguard authors.
//
// FinalOutcome: a decided call, as an immutable value, and how it is
// delivered into the application's batches. Written once when the call is
// decided and never changed after, so any thread may read it without a lock.
// The application's metadata maps point into its strings: it lives as long
// as the call.

#ifndef RPCGUARD_INTERNAL_GRPC_FINAL_OUTCOME_H_
#define RPCGUARD_INTERNAL_GRPC_FINAL_OUTCOME_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/interceptor.h>
#include <grpcpp/support/status.h>

#include <map>
#include <string>

#include "absl/container/inlined_vector.h"
#include "rpcguard/internal/engine/outcome.h"
#include "rpcguard/internal/grpc/factory_state.h"
#include "rpcguard/observability/trace.h"

namespace rpcguard {
namespace internal {

// Points an application's metadata map at `from`, which must outlive it.
void AddMetadata(const Metadata& from,
                 std::multimap<grpc::string_ref, grpc::string_ref>* to);

// Parses `response` into the application's response `object`; false (and
// `*status` says why: INTERNAL) when it cannot, or when `object` is not a
// protobuf message. `method` names the method in such messages.
bool ParseResponse(const grpc::ByteBuffer& response, const std::string& method,
                   void* object, grpc::Status* status);

// Copies a gRPC metadata map into strings that outlive the attempt.
void CopyMetadata(const std::multimap<grpc::string_ref, grpc::string_ref>& from,
                  Metadata* to);

// Fills `batches` (parked batches of a hijacked call) from `outcome` and
// proceeds them, the batch with the status last: it completes the call for
// the application. A response that cannot be parsed into the application's
// response object turns the status into INTERNAL. `method` names the
// method in such messages. `response_object` is a riding call's response
// object (FillReceivedBatch), for its parked POST_RECV_STATUS batch; null
// for a hijacked call.
void ServeBatches(const Batches& batches, const FinalOutcome& outcome,
                  const std::string& method, void* response_object);

// Fills the receive batch (POST_RECV_STATUS) of a riding call, whose first
// attempt was the application's own call: the final attempt's metadata,
// response (parsed into `response_object`) and status replace the first
// attempt's, unless the first attempt is the final one. Does not proceed it.
void FillReceivedBatch(grpc::experimental::InterceptorBatchMethods* b,
                       const FinalOutcome& outcome, const std::string& method,
                       void* response_object);

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_FINAL_OUTCOME_H_
