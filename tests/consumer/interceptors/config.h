// The application's own configuration, in a header whose path,
// "interceptors/config.h", is also where rpcguard's config.h lives in
// rpcguard's source tree. The application includes it as
// "interceptors/config.h"; rpcguard's headers are "rpcguard/...".

// A tripwire, outside the include guard: only the application's .cc files
// include this header. Included from deeper down means a header reached it,
// and the only other headers here are rpcguard's: one of them asked for
// "interceptors/config.h" and got the application's file instead of its own
// (the application's directory comes first on the quote include path).
#if defined(__INCLUDE_LEVEL__) && __INCLUDE_LEVEL__ > 1
#error \
    "interceptors/config.h (the application's) included by another header: does an rpcguard header use a generic \"interceptors/...\" path instead of \"rpcguard/...\"?"
#endif

#ifndef CONSUMER_INTERCEPTORS_CONFIG_H_
#define CONSUMER_INTERCEPTORS_CONFIG_H_

#include <string>

namespace app {

struct Config {
  // rpcguard's per-method policies, in gRPC's service-config JSON.
  std::string retry_json;
  // How many attempts the test server fails with UNAVAILABLE before it
  // answers.
  int failures_before_success = 1;
  std::string greeting = "hello";
};

inline Config DefaultConfig() {
  Config config;
  config.retry_json = R"({
    "methodConfig": [{
      "name": [{"service": "consumer.echo.v1.Echo"}],
      "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s",
                      "maxBackoff": "0.05s", "backoffMultiplier": 2,
                      "retryableStatusCodes": ["UNAVAILABLE"]}}]})";
  return config;
}

}  // namespace app

#endif  // CONSUMER_INTERCEPTORS_CONFIG_H_
