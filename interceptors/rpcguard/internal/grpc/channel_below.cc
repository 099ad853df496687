// Copyright rpcguard authors.

#include "rpcguard/internal/grpc/channel_below.h"

#include <utility>

namespace rpcguard {
namespace internal {

ChannelBelow::~ChannelBelow() { delete kept_.load(std::memory_order_acquire); }

ChannelBelowRef ChannelBelow::For(
    grpc::ChannelInterface* channel, int place,
    grpc::experimental::InterceptorBatchMethods* batch) {
  if (place >= 0) {
    const Kept* kept = kept_.load(std::memory_order_acquire);
    if (kept == nullptr) return Keep(channel, place, batch);
    if (kept->channel == channel && kept->place == place &&
        !kept->alive.expired()) {
      return ChannelBelowRef(kept->below);
    }
  }
  return ChannelBelowRef(batch->GetInterceptedChannel());
}

ChannelBelowRef ChannelBelow::Keep(
    grpc::ChannelInterface* channel, int place,
    grpc::experimental::InterceptorBatchMethods* batch) {
  std::unique_ptr<grpc::ChannelInterface> own = batch->GetInterceptedChannel();
  // Interceptors run only on grpc::Channel, which is always shared.
  auto* real = dynamic_cast<grpc::Channel*>(channel);
  if (own == nullptr || real == nullptr) return ChannelBelowRef(std::move(own));
  std::shared_ptr<grpc::ChannelInterface> below(std::move(own));
  auto kept = std::make_unique<Kept>(
      Kept{channel, place, real->weak_from_this(), below});
  if (kept->alive.expired()) return ChannelBelowRef(std::move(below));
  const Kept* expected = nullptr;
  // Another call may have kept its own first: this one's is then dropped.
  if (kept_.compare_exchange_strong(expected, kept.get(),
                                    std::memory_order_acq_rel)) {
    kept.release();
  }
  return ChannelBelowRef(std::move(below));
}

}  // namespace internal
}  // namespace rpcguard
