// Copyright rpcguard authors.
//
// rpcguard: gRPC C++ client interceptors that make retries safe. The one
// header users include; see README.md for a tour.

#ifndef RPCGUARD_INTERCEPTORS_RPCGUARD_H_
#define RPCGUARD_INTERCEPTORS_RPCGUARD_H_

#include "interceptors/backoff.h"            // IWYU pragma: export
#include "interceptors/clock.h"              // IWYU pragma: export
#include "interceptors/config.h"             // IWYU pragma: export
#include "interceptors/policy.h"             // IWYU pragma: export
#include "interceptors/random.h"             // IWYU pragma: export
#include "interceptors/retry_controller.h"   // IWYU pragma: export
#include "interceptors/retry_interceptor.h"  // IWYU pragma: export
#include "interceptors/server_hints.h"       // IWYU pragma: export
#include "interceptors/stats.h"              // IWYU pragma: export
#include "interceptors/status_class.h"       // IWYU pragma: export
#include "interceptors/trace.h"              // IWYU pragma: export

#endif  // RPCGUARD_INTERCEPTORS_RPCGUARD_H_
