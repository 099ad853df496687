// Copyright rpcguard authors.
//
// ChannelBelow: the channel below rpcguard (the intercepted channel), kept
// by a factory for its calls. Every hijacked call and every hedged call
// needs it for its own attempts, and gRPC hands it out only as a new
// object per request (InterceptorBatchMethods::GetInterceptedChannel): an
// allocation on the no-failure path. An intercepted channel is a channel
// and a place among the call's interceptors, and holds no per-call state,
// so one serves every call that would be given the same pair. The first
// call's is kept and shared; a call whose pair differs (a call started
// past rpcguard's place by an earlier interceptor, a factory registered on
// several channels) gets its own, as before. Knowing the place takes gRPC
// 1.51 (InterceptorPlace); on another gRPC every call gets its own.

#ifndef RPCGUARD_INTERNAL_GRPC_CHANNEL_BELOW_H_
#define RPCGUARD_INTERNAL_GRPC_CHANNEL_BELOW_H_

#include <grpcpp/channel.h>
#include <grpcpp/impl/channel_interface.h>
#include <grpcpp/support/interceptor.h>

#include <atomic>
#include <memory>
#include <utility>

namespace rpcguard {
namespace internal {

// The channel below rpcguard as one call holds it: the factory's kept one
// (shared) or the call's own. Two members, not one shared_ptr: making a
// call's own channel shared would cost a second allocation, on every call
// where the place is not known.
class ChannelBelowRef {
 public:
  ChannelBelowRef() = default;
  explicit ChannelBelowRef(std::shared_ptr<grpc::ChannelInterface> kept)
      : kept_(std::move(kept)) {}
  explicit ChannelBelowRef(std::unique_ptr<grpc::ChannelInterface> own)
      : own_(std::move(own)) {}

  // Null when it holds none.
  grpc::ChannelInterface* get() const {
    return kept_ != nullptr ? kept_.get() : own_.get();
  }

 private:
  std::shared_ptr<grpc::ChannelInterface> kept_;
  std::unique_ptr<grpc::ChannelInterface> own_;
};

class ChannelBelow {
 public:
  ChannelBelow() = default;
  ~ChannelBelow();
  ChannelBelow(const ChannelBelow&) = delete;
  ChannelBelow& operator=(const ChannelBelow&) = delete;

  // The channel below the interceptor at `place` (InterceptorPlace; -1:
  // not known) of a call on `channel`. `batch` is a batch of that call
  // being intercepted now (so `channel` is alive); the result is what its
  // GetInterceptedChannel() would give, shared when it can be. Thread-safe.
  ChannelBelowRef For(grpc::ChannelInterface* channel, int place,
                      grpc::experimental::InterceptorBatchMethods* batch);

 private:
  struct Kept {
    grpc::ChannelInterface* channel;
    int place;
    // Whether `channel` is still the channel it was: a new channel at a
    // freed one's address is another.
    std::weak_ptr<grpc::Channel> alive;
    std::shared_ptr<grpc::ChannelInterface> below;
  };
  ChannelBelowRef Keep(grpc::ChannelInterface* channel, int place,
                       grpc::experimental::InterceptorBatchMethods* batch);

  // Set once, by the first call that can be kept; owned.
  std::atomic<const Kept*> kept_{nullptr};
};

}  // namespace internal
}  // namespace rpcguard

#endif  // RPCGUARD_INTERNAL_GRPC_CHANNEL_BELOW_H_
