// Copyright rpcguard authors.

#include "bench/chain_generator.h"

#include <grpcpp/client_context.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/chain_client.h"
#include "proto/rpcguard/testing/v1/fault.pb.h"

namespace rpcguard {
namespace bench {
namespace chain {
namespace {

using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;

// One request's outcome, written once by its completion.
struct Outcome {
  absl::Duration end;  // since T0
  absl::Duration latency;
  int code = -1;
};

double Quantile(std::vector<absl::Duration> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(q * v.size());
  if (rank >= v.size()) rank = v.size() - 1;
  return absl::ToDoubleMilliseconds(v[rank]);
}

}  // namespace

int RunGenerator(const GeneratorOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(options.client, options.target);
  if (!channel.ok()) {
    std::fprintf(stderr, "chain: generator channel: %s\n",
                 channel.status().ToString().c_str());
    return 1;
  }
  if (!(*channel)->WaitForConnected(
          absl::ToChronoTime(absl::Now() + absl::Seconds(10)))) {
    std::fprintf(stderr, "chain: generator cannot connect to %s\n",
                 options.target.c_str());
    return 1;
  }
  Caller caller(options.client, *channel);
  FaultRequest request;
  request.set_op_id("warm-up");

  // Warm-up: every hop's connection up before T0 (the servers do not count
  // these attempts).
  for (int i = 0; i < 10; ++i) {
    FaultReply reply;
    absl::Notification done;
    caller.Call(
        &request, &reply,
        [] {
          auto context = std::make_unique<grpc::ClientContext>();
          context->set_deadline(
              absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
          return context;
        },
        [&done](grpc::Status) { done.Notify(); });
    done.WaitForNotification();
  }
  WriteStdoutLine("ready");

  std::optional<absl::Time> t0;
  while (!t0.has_value()) {
    std::optional<std::string> line = ReadStdinLine();
    if (!line.has_value()) _exit(1);
    t0 = ParseStart(*line);
  }

  const int n =
      static_cast<int>(options.rate * absl::ToDoubleSeconds(options.duration));
  std::vector<Outcome> outcomes(n);
  std::vector<FaultReply> replies(n);
  // Each request names itself, for the store's per-request counts.
  std::vector<FaultRequest> requests(n);
  for (int i = 0; i < n; ++i) requests[i].set_op_id(absl::StrCat("r", i));
  absl::BlockingCounter pending(n);
  for (int i = 0; i < n; ++i) {
    const absl::Time due = *t0 + absl::Seconds(i / options.rate);
    const absl::Time now = absl::Now();
    if (now < due) absl::SleepFor(due - now);
    const absl::Time deadline = absl::Now() + options.deadline;
    const absl::Time start = *t0;
    caller.Call(
        &requests[i], &replies[i],
        [deadline] {
          auto context = std::make_unique<grpc::ClientContext>();
          context->set_deadline(absl::ToChronoTime(deadline));
          return context;
        },
        [&outcomes, &pending, i, due, start](grpc::Status status) {
          const absl::Time end = absl::Now();
          outcomes[i] = {end - start, end - due,
                         static_cast<int>(status.error_code())};
          pending.DecrementCount();
        });
  }
  pending.Wait();

  const int buckets = BucketsFor(options.duration);
  std::vector<int64_t> sent(buckets), ok(buckets), failed(buckets);
  std::array<int64_t, 17> codes = {};
  std::vector<absl::Duration> latency, ok_latency;
  latency.reserve(n);
  for (int i = 0; i < n; ++i) {
    const Outcome& o = outcomes[i];
    const int64_t due_bucket = std::min<int64_t>(
        buckets - 1, absl::Seconds(i / options.rate) / kBucket);
    ++sent[due_bucket];
    const int64_t end_bucket = std::min<int64_t>(buckets - 1, o.end / kBucket);
    if (o.code == 0) {
      ++ok[end_bucket];
      ok_latency.push_back(o.latency);
    } else {
      ++failed[end_bucket];
    }
    if (o.code >= 0 && o.code < 17) ++codes[o.code];
    latency.push_back(o.latency);
  }
  int64_t ok_total = 0;
  for (int64_t c : ok) ok_total += c;
  std::string json = absl::StrCat(
      "{\"requests\": ", n, ", \"ok\": ", ok_total, ", \"codes\": [",
      absl::StrJoin(codes, ", "), "], \"p50_ms\": ", Quantile(latency, 0.5),
      ", \"p99_ms\": ", Quantile(latency, 0.99),
      ", \"ok_p50_ms\": ", Quantile(ok_latency, 0.5),
      ", \"ok_p99_ms\": ", Quantile(ok_latency, 0.99), ", \"sent\": [",
      absl::StrJoin(sent, ", "), "], \"ok_by_end\": [", absl::StrJoin(ok, ", "),
      "], \"failed_by_end\": [", absl::StrJoin(failed, ", "), "]}");
  WriteStdoutLine(absl::StrCat("result ", json));
  // See chain_servers.h: nothing to tear down.
  _exit(0);
}

}  // namespace chain
}  // namespace bench
}  // namespace rpcguard
