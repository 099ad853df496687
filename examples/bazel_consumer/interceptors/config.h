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

#ifndef ORDERS_APP_INTERCEPTORS_CONFIG_H_
#define ORDERS_APP_INTERCEPTORS_CONFIG_H_

#include <chrono>
#include <string>

namespace app {

struct Config {
  // How many attempts of each call the test server fails with UNAVAILABLE
  // before it answers.
  int failures_per_call = 1;
  // Each call's deadline.
  std::chrono::seconds deadline{10};
  std::string item = "widget";
};

}  // namespace app

#endif  // ORDERS_APP_INTERCEPTORS_CONFIG_H_
