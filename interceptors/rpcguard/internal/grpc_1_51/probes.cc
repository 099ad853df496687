// Copyright rpcguard authors.

#include "rpcguard/internal/grpc_1_51/probes.h"

#include <dlfcn.h>
#include <grpc/grpc.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "rpcguard/internal/grpc_1_51/grpc_version.h"
#include "rpcguard/internal/grpc_1_51/private_member.h"

namespace rpcguard {
namespace internal {

bool ProbesKnowThisGrpc() { return RPCGUARD_GRPC_1_51 != 0; }

namespace {

// Vtable pointers known to be protobuf messages'; empty slots are null.
constexpr int kKnownVtables = 32;
std::atomic<const void*> known_vtables[kKnownVtables];

}  // namespace

bool IsProtobufMessage(const void* object) {
  if (object == nullptr) return false;
  const void* first_word;
  std::memcpy(&first_word, object, sizeof(first_word));
  if (first_word == nullptr) return false;  // an empty ByteBuffer
  for (const auto& known : known_vtables) {
    const void* v = known.load(std::memory_order_relaxed);
    if (v == first_word) return true;
    if (v == nullptr) break;
  }
  Dl_info info;
  if (dladdr(first_word, &info) == 0) return false;  // a heap pointer
  for (auto& known : known_vtables) {
    const void* expected = nullptr;
    if (known.compare_exchange_strong(expected, first_word,
                                      std::memory_order_relaxed) ||
        expected == first_word) {
      break;
    }
  }
  return true;
}

bool IsCallbackUnaryCall(grpc::experimental::InterceptorBatchMethods* batch,
                         grpc::ClientContext* context) {
#if RPCGUARD_GRPC_1_51
  const grpc::Status* status = batch->GetRecvStatus();
  grpc_call* call = context->c_call();
  if (status == nullptr || call == nullptr) return false;
  const auto next = reinterpret_cast<uintptr_t>(grpc_call_arena_alloc(call, 1));
  const auto end = reinterpret_cast<uintptr_t>(status + 1);
  // The arena rounds every allocation up to 16 bytes.
  return end <= next && next - end < 16;
#else
  (void)batch;
  (void)context;
  return false;
#endif
}

#if RPCGUARD_GRPC_1_51
namespace {
RPCGUARD_PRIVATE_MEMBER(
    RpcInfoInterceptors, grpc::experimental::ClientRpcInfo,
    std::vector<std::unique_ptr<grpc::experimental::Interceptor>>,
    interceptors_);
}  // namespace
#endif  // RPCGUARD_GRPC_1_51

int InterceptorPlace(const grpc::experimental::ClientRpcInfo& info) {
#if RPCGUARD_GRPC_1_51
  return static_cast<int>((info.*Get(RpcInfoInterceptors())).size());
#else
  (void)info;
  return -1;
#endif
}

}  // namespace internal
}  // namespace rpcguard
