// Copyright rpcguard authors.
//
// The one version gate of rpcguard's gRPC-specific code. RPCGUARD_GRPC_1_51
// is 1 when rpcguard may use what it knows of gRPC 1.51's internals (the
// probes in grpc_1_51/probes.cc, the ClientContext members in
// grpc_1_51/context.cc, the serialized attempt call in attempt_call.cc), and
// 0 on any other gRPC, where only gRPC's public API is used: correct, slower,
// and attempts lose what that API hides (README, "gRPC versions").
//
// Defining RPCGUARD_NO_GRPC_1_51_FAST_PATHS compiles the fast paths out on
// gRPC 1.51 too, as a newer gRPC would: `./bazelw test
// --config=no_grpc_fast_paths //tests/...` runs the suite that way.

#ifndef RPCGUARD_INTERNAL_GRPC_1_51_GRPC_VERSION_H_
#define RPCGUARD_INTERNAL_GRPC_1_51_GRPC_VERSION_H_

#include <grpcpp/version_info.h>

#if GRPC_CPP_VERSION_MAJOR == 1 && GRPC_CPP_VERSION_MINOR == 51 && \
    !defined(RPCGUARD_NO_GRPC_1_51_FAST_PATHS)
#define RPCGUARD_GRPC_1_51 1
#else
#define RPCGUARD_GRPC_1_51 0
#endif

#endif  // RPCGUARD_INTERNAL_GRPC_1_51_GRPC_VERSION_H_
