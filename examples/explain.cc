// Copyright rpcguard authors.
//
// Prints, for each method of examples/payments.proto, the retry policy
// rpcguard resolves and which source decided each setting: the .proto
// options alone, then with a JSON config that overrides some of them.
//
//   ./bazelw run //examples:explain

#include <cstdio>

#include "examples/payments.grpc.pb.h"
#include "rpcguard/rpcguard.h"

int main() {
  const char* methods[] = {
      "/examples.payments.v1.Payments/Charge",
      "/examples.payments.v1.Payments/GetBalance",
      "/examples.payments.v1.Payments/SetLimit",
      "/examples.payments.v1.Payments/Refund",
  };
  // Touching a generated message links payments.pb.cc, which registers the
  // descriptors (and their options) in the generated pool. Code that uses
  // the stub does this by itself.
  std::printf("== From examples/payments.proto alone (%s)\n\n",
              examples::payments::v1::ChargeRequest::descriptor()
                  ->file()
                  ->name()
                  .c_str());
  const rpcguard::Config from_proto;
  for (const char* m : methods) {
    std::printf("%s\n", from_proto.Explain(m).c_str());
  }

  // JSON outranks the .proto: here it gives GetBalance a faster policy and
  // takes away Charge's retries while the server's deduplication is down.
  absl::StatusOr<rpcguard::Config> with_json = rpcguard::Config::FromJson(R"({
    "methodConfig": [
      {"name": [{"service": "examples.payments.v1.Payments", "method": "GetBalance"}],
       "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.01s",
                       "maxBackoff": "0.1s", "backoffMultiplier": 2,
                       "retryableStatusCodes": ["UNAVAILABLE"]}},
      {"name": [{"service": "examples.payments.v1.Payments", "method": "Charge"}],
       "rpcguard": {"idempotency": "UNKNOWN"}}]})");
  if (!with_json.ok()) {
    std::fprintf(stderr, "explain: %s\n",
                 with_json.status().ToString().c_str());
    return 1;
  }
  std::printf("== With a JSON config on top\n\n");
  for (const char* m : {methods[0], methods[1]}) {
    std::printf("%s\n", with_json->Explain(m).c_str());
  }
  return 0;
}
