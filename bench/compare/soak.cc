// Copyright rpcguard authors.
//
// The soak (--soak[=N]): many calls through rpcguard, alternating sync and
// callback chunks of 8 callers, with faults; reports the client's RSS as it
// goes, so that a leak per call shows as growth.

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "bench/compare/families.h"

namespace rpcguard {
namespace bench {

using ::rpcguard::testing::v1::FaultService;

int RunSoak(const Flags& flags, const Env& env, ServerProcess& server,
            const Machine& machine) {
  const int64_t total =
      flags.soak > 0 ? flags.soak : (flags.quick ? 100000 : 1000000);
  const int chunks = 20;
  const int64_t chunk = std::max<int64_t>(1, total / chunks);
  const absl::Duration deadline = absl::Milliseconds(flags.deadline_ms);
  std::fprintf(stderr,
               "compare --soak: %lld calls through rpcguard, %d%% "
               "UNAVAILABLE, 8 callers, sync and callback chunks of %lld\n",
               static_cast<long long>(total), flags.soak_fail_percent,
               static_cast<long long>(chunk));
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ConnectedChannel(ClientKind::kRpcguard, env.address, RetrySettings());
  if (!channel.ok()) {
    std::fprintf(stderr, "compare: %s\n", channel.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<FaultService::Stub> stub = FaultService::NewStub(*channel);

  auto run_chunk = [&](int index, int64_t calls) {
    LoadSpec spec;
    spec.stub = index % 2 == 0 ? StubKind::kSync : StubKind::kCallback;
    spec.concurrency = 8;
    spec.calls = calls;
    spec.deadline = deadline;
    spec.label = "soak";
    return RunLoad(*stub, spec);
  };
  absl::Status s = env.control->SetMode(flags.soak_fail_percent, 0);
  if (!s.ok()) {
    std::fprintf(stderr, "compare: %s\n", s.ToString().c_str());
    return 1;
  }
  // Warm-up: one chunk of each stub, not counted, same size as the rest so
  // that the driver's own buffers are already at their size.
  run_chunk(0, chunk);
  run_chunk(1, chunk);
  const int64_t rss_start = ReadRssKib();
  const absl::Time start = absl::Now();
  // A point per chunk: calls so far, client and server RSS.
  std::vector<Row> points;
  auto point = [&](int64_t calls, int64_t rss_kib, int64_t server_rss_kib) {
    Row row;
    row.Both("calls", "calls", absl::StrCat(calls), JsonValue::Int(calls))
        .TableOnly("client RSS MiB", Fixed(rss_kib / 1024.0, 1))
        .JsonOnly("rss_kib", JsonValue::Int(rss_kib))
        .TableOnly("server RSS MiB", Fixed(server_rss_kib / 1024.0, 1))
        .JsonOnly("server_rss_kib", JsonValue::Int(server_rss_kib));
    points.push_back(std::move(row));
  };
  point(0, rss_start, server.RssKib());
  std::vector<int64_t> rss_points = {rss_start};
  int64_t done = 0;
  int64_t ok = 0;
  int64_t late = 0;
  int64_t peak = rss_start;
  for (int i = 0; i < chunks; ++i) {
    const LoadResult r = run_chunk(i, chunk);
    done += r.calls;
    ok += r.ok;
    late += r.late;
    const int64_t rss = ReadRssKib();
    peak = std::max(peak, rss);
    point(done, rss, server.RssKib());
    rss_points.push_back(rss);
    std::fprintf(stderr, "  %9lld calls  client RSS %7.1f MiB\n",
                 static_cast<long long>(done), rss / 1024.0);
  }
  env.control->SetMode(0, 0).IgnoreError();
  const absl::Duration took = absl::Now() - start;
  const int64_t growth = rss_points.back() - rss_start;
  const int64_t second_half =
      rss_points.back() - rss_points[rss_points.size() / 2];

  std::printf("\n%s\n\n", MachineLine(machine).c_str());
  std::printf(
      "Soak: %lld calls through rpcguard (after %lld warm-up calls), %d%% "
      "UNAVAILABLE, 8 callers, sync and callback stub in alternate chunks, "
      "deadline %lld ms; took %s.\n\n",
      static_cast<long long>(done), static_cast<long long>(2 * chunk),
      flags.soak_fail_percent,
      static_cast<long long>(absl::ToInt64Milliseconds(deadline)),
      absl::FormatDuration(absl::Trunc(took, absl::Seconds(1))).c_str());
  std::fputs(MarkdownTable(points).c_str(), stdout);
  std::printf(
      "\nclient RSS growth: %.2f MiB over %lld calls (second half: %.2f MiB; "
      "peak %.1f MiB); target < 5 MiB: %s. Success %.2f%%, late calls %lld.\n",
      growth / 1024.0, static_cast<long long>(done), second_half / 1024.0,
      peak / 1024.0, growth < 5 * 1024 ? "met" : "NOT met",
      done > 0 ? 100.0 * ok / done : 0.0, static_cast<long long>(late));
  std::fflush(stdout);

  if (!flags.json.empty()) {
    JsonValue json = RunJsonHeader(flags, MakePlan(flags), machine, "soak");
    json.Add("calls", JsonValue::Int(done))
        .Add("fail_percent", JsonValue::Int(flags.soak_fail_percent))
        .Add("ok", JsonValue::Int(ok))
        .Add("late_calls", JsonValue::Int(late))
        .Add("rss_growth_kib", JsonValue::Int(growth))
        .Add("rss_growth_second_half_kib", JsonValue::Int(second_half))
        .Add("seconds", JsonValue::Int(absl::ToInt64Seconds(took)))
        .Add("points", JsonRows(points));
    absl::Status w = WriteJsonFile(flags.json, json);
    if (!w.ok()) {
      std::fprintf(stderr, "compare: %s\n", w.ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "compare: wrote %s\n", flags.json.c_str());
  }
  return 0;
}

}  // namespace bench
}  // namespace rpcguard
