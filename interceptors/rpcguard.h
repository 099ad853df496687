// Copyright rpcguard authors.
//
// rpcguard: gRPC C++ client interceptors that make retries safe. The one
// header users include; see README.md for a tour.

#ifndef RPCGUARD_RPCGUARD_H_
#define RPCGUARD_RPCGUARD_H_

#include "rpcguard/decision/backoff.h"            // IWYU pragma: export
#include "rpcguard/clock.h"              // IWYU pragma: export
#include "rpcguard/config.h"             // IWYU pragma: export
#include "rpcguard/decision/policy.h"             // IWYU pragma: export
#include "rpcguard/random.h"             // IWYU pragma: export
#include "rpcguard/decision/retry_controller.h"   // IWYU pragma: export
#include "rpcguard/channel.h"  // IWYU pragma: export
#include "rpcguard/decision/server_hints.h"       // IWYU pragma: export
#include "rpcguard/observability/stats.h"              // IWYU pragma: export
#include "rpcguard/decision/status_class.h"       // IWYU pragma: export
#include "rpcguard/observability/trace.h"              // IWYU pragma: export

#endif  // RPCGUARD_RPCGUARD_H_
