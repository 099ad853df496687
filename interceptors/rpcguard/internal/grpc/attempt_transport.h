// Copyright rpcguard authors.
//
// AttemptTransport: how one call's attempts travel, the seam between the
// call (HijackedCall, the engine's CallIo) and the wire. A unary call sends
// one RPC an attempt and keeps the last one's response
// (HijackedCall::Unary); a stream runs a data plane of its own, which
// replays the requests to each attempt and delivers the committed one's
// responses (StreamFlow). The call asks its transport and never which one
// it has. Internal to rpcguard.

#ifndef RPCGUARD_INTERNAL_GRPC_ATTEMPT_TRANSPORT_H_
#define RPCGUARD_INTERNAL_GRPC_ATTEMPT_TRANSPORT_H_

#include <grpcpp/impl/channel_interface.h>
#include <grpcpp/support/status.h>

#include <memory>

#include "rpcguard/internal/engine/call_engine.h"
#include "rpcguard/internal/grpc/final_outcome.h"

namespace rpcguard {
namespace internal {

// What a transport tells the call it belongs to. Called from the call's
// events (on its serializer), or for an attempt's end from gRPC's thread.
class TransportOwner {
 public:
  virtual ~TransportOwner() = default;
  // The attempt ended with `status`; its context's trailers are readable.
  // The engine hears of it now.
  virtual void OnAttemptEnded(EngineAttempt* attempt, grpc::Status status) = 0;
  // A stream commits to its current attempt, for `reason`: the owner keeps
  // the fact (the first commit counts; none once the call is decided), and
  // the flow reads it back through commit(), so it is kept once. From the
  // flow's event, before anything the event does after.
  virtual void Commit(CommitReason reason) = 0;
  // The call's commit, if it has committed.
  virtual std::optional<CommitReason> commit() const = 0;
  // A reference that keeps the owner (and the transport) alive: taken by an
  // event that serves the application's last batch, after which the
  // application may destroy its call (Serializer::KeepAlive).
  virtual std::shared_ptr<void> Hold() = 0;
};

// Every method is called from an event on the call's serializer, one at a
// time.
class AttemptTransport {
 public:
  virtual ~AttemptTransport() = default;
  // A new attempt, not yet sent, with a fresh grpc::ClientContext.
  virtual std::shared_ptr<EngineAttempt> NewAttempt() = 0;
  // Whether an attempt's context runs to the call's deadline rather than
  // to the attempt's own (a per-attempt timeout would cut a committed
  // stream short).
  virtual bool RunsToCallDeadline() const = 0;
  // Starts `attempt` (its context prepared) on `channel`; its end comes
  // back through TransportOwner::OnAttemptEnded, perhaps before this
  // returns.
  virtual void Send(const std::shared_ptr<EngineAttempt>& attempt,
                    grpc::ChannelInterface* channel) = 0;
  // Cancels the attempt whose EngineAttempt::context this is (null: none).
  virtual void Cancel(const std::shared_ptr<void>& context) = 0;
  // Moves the final attempt's response, if the transport keeps one, into
  // `out`.
  virtual void TakeResponse(EngineAttempt& last, FinalOutcome* out) = 0;
  // The call is decided: what waits in the transport is served from
  // `outcome`, which outlives it.
  virtual void Conclude(const FinalOutcome& outcome) = 0;
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_ATTEMPT_TRANSPORT_H_
