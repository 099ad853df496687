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
#include "bench/clients.h"
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
  absl::StatusOr<std::shared_ptr<RpcguardState>> state =
      RpcguardState::Create();
  if (!state.ok()) {
    std::fprintf(stderr, "chain: generator state: %s\n",
                 state.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(options.client, options.target, *state);
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

  // Warm-up: every hop has carried calls before T0 (the servers do not
  // count these attempts). A cold scenario starts without: its channels are
  // connected (the tiers wait for theirs) and have carried nothing.
  const int warm_up = IsCold(options.scenario) ? 0 : 10;
  for (int i = 0; i < warm_up; ++i) {
    FaultReply reply;
    absl::Notification done;
    caller.Call(
        Method::kGet, &request, &reply,
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
  // Put rides beside every other Get (kSplit): index i / 2 is request 2i's.
  const bool independent =
      HasIndependentMethod(options.scenario, options.client);
  const int puts = independent ? (n + 1) / 2 : 0;
  std::vector<Outcome> outcomes(n), put_outcomes(puts);
  std::vector<FaultReply> replies(n), put_replies(puts);
  // Each request names itself, for the store's per-request counts.
  std::vector<FaultRequest> requests(n), put_requests(puts);
  for (int i = 0; i < n; ++i) requests[i].set_op_id(absl::StrCat("r", i));
  for (int i = 0; i < puts; ++i) {
    put_requests[i].set_op_id(absl::StrCat("p", 2 * i));
  }
  absl::BlockingCounter pending(n + puts);
  for (int i = 0; i < n; ++i) {
    const absl::Time due = *t0 + absl::Seconds(i / options.rate);
    const absl::Time now = absl::Now();
    if (now < due) absl::SleepFor(due - now);
    const absl::Time deadline = absl::Now() + options.deadline;
    const absl::Time start = *t0;
    auto make_context = [deadline] {
      auto context = std::make_unique<grpc::ClientContext>();
      context->set_deadline(absl::ToChronoTime(deadline));
      return context;
    };
    auto record = [&pending, due, start](Outcome* outcome) {
      return [&pending, due, start, outcome](grpc::Status status) {
        const absl::Time end = absl::Now();
        *outcome = {end - start, end - due,
                    static_cast<int>(status.error_code())};
        pending.DecrementCount();
      };
    };
    caller.Call(Method::kGet, &requests[i], &replies[i], make_context,
                record(&outcomes[i]));
    if (independent && i % 2 == 0) {
      caller.Call(Method::kPut, &put_requests[i / 2], &put_replies[i / 2],
                  make_context, record(&put_outcomes[i / 2]));
    }
  }
  pending.Wait();

  const int buckets = BucketsFor(options.duration);
  // Per bucket: requests by due time, ok and failed by end time.
  struct Counts {
    std::vector<int64_t> sent, ok, failed;
    std::array<int64_t, 17> codes = {};
    std::vector<absl::Duration> latency, ok_latency;
    int64_t ok_total = 0;
  };
  auto count = [&](const std::vector<Outcome>& of, int stride) {
    Counts c;
    c.sent.assign(buckets, 0);
    c.ok.assign(buckets, 0);
    c.failed.assign(buckets, 0);
    c.latency.reserve(of.size());
    for (size_t k = 0; k < of.size(); ++k) {
      const Outcome& o = of[k];
      const int64_t due_bucket = std::min<int64_t>(
          buckets - 1,
          absl::Seconds(static_cast<double>(k * stride) / options.rate) /
              kBucket);
      ++c.sent[due_bucket];
      const int64_t end_bucket =
          std::min<int64_t>(buckets - 1, o.end / kBucket);
      if (o.code == 0) {
        ++c.ok[end_bucket];
        ++c.ok_total;
        c.ok_latency.push_back(o.latency);
      } else {
        ++c.failed[end_bucket];
      }
      if (o.code >= 0 && o.code < 17) ++c.codes[o.code];
      c.latency.push_back(o.latency);
    }
    return c;
  };
  const Counts get = count(outcomes, 1);
  std::string json = absl::StrCat(
      "{\"requests\": ", n, ", \"ok\": ", get.ok_total, ", \"codes\": [",
      absl::StrJoin(get.codes, ", "),
      "], \"p50_ms\": ", Quantile(get.latency, 0.5),
      ", \"p99_ms\": ", Quantile(get.latency, 0.99),
      ", \"ok_p50_ms\": ", Quantile(get.ok_latency, 0.5),
      ", \"ok_p99_ms\": ", Quantile(get.ok_latency, 0.99),
      ", \"breaker_openings\": ", (*state)->breaker_openings(), ", \"sent\": [",
      absl::StrJoin(get.sent, ", "), "], \"ok_by_end\": [",
      absl::StrJoin(get.ok, ", "), "], \"failed_by_end\": [",
      absl::StrJoin(get.failed, ", "), "]");
  if (independent) {
    const Counts put = count(put_outcomes, 2);
    absl::StrAppend(
        &json, ", \"independent_requests\": ", puts,
        ", \"independent_ok\": ", put.ok_total, ", \"independent_codes\": [",
        absl::StrJoin(put.codes, ", "), "], \"independent_ok_by_end\": [",
        absl::StrJoin(put.ok, ", "), "], \"independent_failed_by_end\": [",
        absl::StrJoin(put.failed, ", "), "]");
  }
  json += "}";
  WriteStdoutLine(absl::StrCat("result ", json));
  // See chain_servers.h: nothing to tear down.
  _exit(0);
}

}  // namespace chain
}  // namespace bench
}  // namespace rpcguard
