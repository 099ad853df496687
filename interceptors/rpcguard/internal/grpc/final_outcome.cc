// Copyright rpcguard authors.

#include "rpcguard/internal/grpc/final_outcome.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include "absl/strings/str_cat.h"
#include "rpcguard/channel.h"
#include "rpcguard/internal/grpc_1_51/probes.h"

namespace rpcguard {
namespace internal {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;

// Parses the final response into the application's response `object`;
// false (and `*status` says why) when it cannot.
bool FillMessage(void* object, const FinalOutcome& outcome,
                 const std::string& method, grpc::Status* status) {
  if (!status->ok()) return false;
  return ParseResponse(outcome.response, method, object, status);
}

// Fills one parked batch; `status` is the status still to report, which a
// response that cannot be parsed turns into INTERNAL.
void FillBatch(InterceptorBatchMethods* b, const FinalOutcome& outcome,
               const std::string& method, void* response_object,
               grpc::Status* status) {
  if (b->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_STATUS)) {
    FillReceivedBatch(b, outcome, method, response_object);
    return;
  }
  if (b->QueryInterceptionHookPoint(
          InterceptionHookPoints::PRE_RECV_INITIAL_METADATA)) {
    AddMetadata(outcome.initial_metadata, b->GetRecvInitialMetadata());
  }
  if (b->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_RECV_MESSAGE)) {
    if (!FillMessage(b->GetRecvMessage(), outcome, method, status)) {
      b->FailHijackedRecvMessage();
    }
  }
  if (b->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_RECV_STATUS)) {
    *b->GetRecvStatus() = *status;
    auto* map = b->GetRecvTrailingMetadata();
    AddMetadata(outcome.trailing_metadata, map);
    map->emplace(grpc::string_ref(kAttemptsTrailer),
                 grpc::string_ref(outcome.attempts_text));
  }
}

}  // namespace

void AddMetadata(const Metadata& from,
                 std::multimap<grpc::string_ref, grpc::string_ref>* to) {
  for (const auto& kv : from) {
    to->emplace(grpc::string_ref(kv.first), grpc::string_ref(kv.second));
  }
}

bool ParseResponse(const grpc::ByteBuffer& response, const std::string& method,
                   void* object, grpc::Status* status) {
  if (!IsProtobufMessage(object)) {
    *status = grpc::Status(
        grpc::StatusCode::INTERNAL,
        absl::StrCat("rpcguard: the response object of ", method,
                     " is not a protobuf message (a grpc::GenericStub "
                     "call with grpc::ByteBuffer?); call "
                     "rpcguard::MarkPassThrough(&context) before such "
                     "calls"));
    return false;
  }
  // Generated stubs in gRPC 1.51 receive into a MessageLite; ByteBuffer
  // callers must opt out (MarkPassThrough). Read in place:
  // SerializationTraits::Deserialize would clear the buffer, and the
  // outcome is immutable. The reader only reads (it takes a non-const
  // pointer for its own reasons).
  grpc::ProtoBufferReader reader(const_cast<grpc::ByteBuffer*>(&response));
  auto* message = static_cast<grpc::protobuf::MessageLite*>(object);
  if (!reader.status().ok() || !message->ParseFromZeroCopyStream(&reader)) {
    *status = grpc::Status(
        grpc::StatusCode::INTERNAL,
        absl::StrCat("rpcguard: cannot parse the response of ", method, ": ",
                     reader.status().ok() ? message->InitializationErrorString()
                                          : reader.status().error_message()));
    return false;
  }
  return true;
}

void CopyMetadata(const std::multimap<grpc::string_ref, grpc::string_ref>& from,
                  Metadata* to) {
  for (const auto& kv : from) {
    to->emplace_back(std::string(kv.first.data(), kv.first.size()),
                     std::string(kv.second.data(), kv.second.size()));
  }
}

void ServeBatches(const Batches& batches, const FinalOutcome& outcome,
                  const std::string& method, void* response_object) {
  grpc::Status status = outcome.status;
  InterceptorBatchMethods* status_batch = nullptr;
  for (InterceptorBatchMethods* b : batches) {
    if (b->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_RECV_STATUS)) {
      status_batch = b;  // a unary call has one
    } else {
      FillBatch(b, outcome, method, response_object, &status);
      b->Proceed();
    }
  }
  if (status_batch != nullptr) {
    FillBatch(status_batch, outcome, method, response_object, &status);
    status_batch->Proceed();
  }
}

void FillReceivedBatch(InterceptorBatchMethods* b, const FinalOutcome& outcome,
                       const std::string& method, void* response_object) {
  auto* trailing = b->GetRecvTrailingMetadata();
  grpc::Status status = outcome.status;
  if (!outcome.from_app_call) {
    if (b->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      auto* map = b->GetRecvInitialMetadata();
      map->clear();
      AddMetadata(outcome.initial_metadata, map);
    }
    // The batch's own message pointer is null after a failed attempt: the
    // object was captured with the first batch.
    FillMessage(response_object, outcome, method, &status);
    trailing->clear();
    AddMetadata(outcome.trailing_metadata, trailing);
  }
  // On a non-OK status the reply holds no attempt's message, as a hijacked
  // call's never does: gRPC itself parsed attempt 1's into it.
  if (!status.ok() && IsProtobufMessage(response_object)) {
    static_cast<grpc::protobuf::MessageLite*>(response_object)->Clear();
  }
  *b->GetRecvStatus() = status;
  trailing->emplace(grpc::string_ref(kAttemptsTrailer),
                    grpc::string_ref(outcome.attempts_text));
}

}  // namespace internal
}  // namespace rpcguard
