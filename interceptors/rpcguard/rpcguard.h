// Copyright rpcguard authors.
//
// rpcguard: gRPC C++ client interceptors that make retries safe. The one
// header users include; see README.md for a tour.
//
// What it exports, and nothing else:
//   channel.h              CreateChannel, MakeInterceptorFactory, Options,
//                          MarkPassThrough, CredentialRefresher, the
//                          metadata names, DefaultStats
//   call_policy.h          SetCallPolicy and CallPolicy: a policy for one
//                          call, in place of its method's
//   config.h               Config (JSON and .proto declarations), Explain,
//                          MethodPolicy and its parts
//   destination/registry.h BreakerRegistry and its options; CircuitBreaker
//                          (to inspect, force open or reset a breaker)
//   observability/trace.h  TraceSink and its sinks, TraceEvent, verbosity,
//                          GiveUpHook
//   observability/correlation.h  the caller's correlation ids on trace
//                          lines: traceparent parsing, the key rules
//   observability/stats.h  Stats, snapshots, Prometheus text
//   clock.h, random.h      the injectable time and randomness
//   version.h              RPCGUARD_VERSION_* and Version()
// The decision internals (retry controller, backoff, classifier, call plan,
// retry gate) and everything under internal/ are not part of the API.

#ifndef RPCGUARD_RPCGUARD_H_
#define RPCGUARD_RPCGUARD_H_

// Before any include, so that it is the first error a C++14 build meets
// (clang 14's default; GCC 11 and later default to C++17).
#if !defined(__cplusplus) || __cplusplus < 201703L
#error \
    "rpcguard needs C++17: with Bazel, add `build --cxxopt=-std=c++17 --host_cxxopt=-std=c++17` to your .bazelrc; otherwise compile with -std=c++17"
#endif

#include "rpcguard/call_policy.h"                // IWYU pragma: export
#include "rpcguard/channel.h"                    // IWYU pragma: export
#include "rpcguard/clock.h"                      // IWYU pragma: export
#include "rpcguard/config.h"                     // IWYU pragma: export
#include "rpcguard/destination/registry.h"       // IWYU pragma: export
#include "rpcguard/observability/correlation.h"  // IWYU pragma: export
#include "rpcguard/observability/stats.h"        // IWYU pragma: export
#include "rpcguard/observability/trace.h"        // IWYU pragma: export
#include "rpcguard/random.h"                     // IWYU pragma: export
#include "rpcguard/server.h"                     // IWYU pragma: export
#include "rpcguard/version.h"                    // IWYU pragma: export

#endif  // RPCGUARD_RPCGUARD_H_
