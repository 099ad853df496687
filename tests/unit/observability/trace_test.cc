// Copyright rpcguard authors.

#include "rpcguard/observability/trace.h"

#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rpcguard {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

absl::Time SampleTime() {
  return absl::FromCivil(absl::CivilSecond(2026, 11, 30, 5, 1, 2),
                         absl::UTCTimeZone()) +
         absl::Microseconds(123456);
}

TraceEvent RetryEvent() {
  TraceEvent e;
  e.kind = TraceEvent::Kind::kAttempt;
  e.time = SampleTime();
  e.call_id = 0x1a2b;
  e.method = "/pkg.Svc/M";
  e.attempt = 2;
  e.code = grpc::StatusCode::UNAVAILABLE;
  e.status_class = StatusClass::kRetriable;
  e.decision = TraceDecision::kRetry;
  e.backoff = absl::Microseconds(12300);
  e.deadline_left = absl::Microseconds(480100);
  e.breaker_key = "payments:443";
  e.breaker_state = "closed";
  e.idempotency_key = "0f8fad5b-d9cb-469f-a165-70867728950e";
  e.message = "server busy";
  return e;
}

TraceEvent GiveUpEvent() {
  TraceEvent e;
  e.time = SampleTime();
  e.call_id = 0xffffffffffffffff;
  e.method = "/pkg.Svc/M";
  e.attempt = 3;
  e.code = grpc::StatusCode::DEADLINE_EXCEEDED;
  e.status_class = StatusClass::kFatal;
  e.decision = TraceDecision::kGiveUp;
  e.reason = GiveUpReason::kDeadline;
  return e;  // no deadline, breaker, key or message
}

TraceEvent FailFastEvent() {
  TraceEvent e;
  e.kind = TraceEvent::Kind::kFailFast;
  e.time = SampleTime();
  e.call_id = 7;
  e.method = "/pkg.Svc/M";
  e.attempt = 1;
  e.code = grpc::StatusCode::UNAVAILABLE;
  e.status_class = StatusClass::kRetriable;  // not written: nothing was sent
  e.decision = TraceDecision::kGiveUp;
  e.reason = GiveUpReason::kBreakerOpen;
  e.deadline_left = -absl::Microseconds(1500);
  e.breaker_key = "payments:443";
  e.breaker_state = "open";
  e.idempotency_key = "k";
  return e;
}

TraceEvent TransitionEvent() {
  TraceEvent e;
  e.kind = TraceEvent::Kind::kBreakerTransition;
  e.time = SampleTime();
  e.breaker_key = "payments:443";
  e.from_state = "closed";
  e.to_state = "open";
  e.message = "failure rate 60% over 20 calls";
  return e;
}

TEST(FormatLogfmtTest, RetryLine) {
  EXPECT_EQ(FormatLogfmt(RetryEvent()),
            "ts=2026-11-30T05:01:02.123456Z level=info msg=rpcguard "
            "event=attempt call=1a2b method=/pkg.Svc/M attempt=2 "
            "code=UNAVAILABLE class=retriable decision=retry reason=- "
            "backoff_ms=12.3 deadline_left_ms=480.1 breaker=closed "
            "breaker_key=payments:443 "
            "key=0f8fad5b-d9cb-469f-a165-70867728950e "
            "message=\"server busy\"\n");
}

TEST(FormatLogfmtTest, GiveUpWithoutDeadlineBreakerOrKey) {
  EXPECT_EQ(FormatLogfmt(GiveUpEvent()),
            "ts=2026-11-30T05:01:02.123456Z level=warn msg=rpcguard "
            "event=attempt call=ffffffffffffffff method=/pkg.Svc/M attempt=3 "
            "code=DEADLINE_EXCEEDED class=fatal decision=give_up "
            "reason=deadline backoff_ms=0 deadline_left_ms=inf breaker=- "
            "breaker_key=- key=-\n");
}

TEST(FormatLogfmtTest, FailFastLine) {
  EXPECT_EQ(FormatLogfmt(FailFastEvent()),
            "ts=2026-11-30T05:01:02.123456Z level=warn msg=rpcguard "
            "event=fail_fast call=7 method=/pkg.Svc/M attempt=1 "
            "code=UNAVAILABLE class=- decision=give_up "
            "reason=breaker_open backoff_ms=0 deadline_left_ms=-1.5 "
            "breaker=open breaker_key=payments:443 key=k\n");
}

// A hedged call's copy just sent: no code or class yet; backoff_ms says
// how long after the first copy it went out.
TEST(FormatLogfmtTest, HedgeLine) {
  TraceEvent e = RetryEvent();
  e.kind = TraceEvent::Kind::kHedge;
  e.decision = TraceDecision::kHedge;
  e.message.clear();
  EXPECT_EQ(FormatLogfmt(e),
            "ts=2026-11-30T05:01:02.123456Z level=info msg=rpcguard "
            "event=hedge call=1a2b method=/pkg.Svc/M attempt=2 "
            "code=- class=- decision=hedge reason=- "
            "backoff_ms=12.3 deadline_left_ms=480.1 breaker=closed "
            "breaker_key=payments:443 "
            "key=0f8fad5b-d9cb-469f-a165-70867728950e\n");
}

// A hedged call's end names the copy that decided it and those cancelled.
TEST(FormatLogfmtTest, HedgedCallsEndNamesItsCopies) {
  TraceEvent e = RetryEvent();
  e.decision = TraceDecision::kDone;
  e.code = grpc::StatusCode::OK;
  e.status_class = StatusClass::kOk;
  e.backoff = absl::ZeroDuration();
  e.message.clear();
  e.copy = 2;
  e.cancelled = {1, 3};
  EXPECT_THAT(FormatLogfmt(e), ::testing::EndsWith(" copy=2 cancelled=1,3\n"));
  EXPECT_THAT(FormatJson(e),
              ::testing::EndsWith(",\"copy\":2,\"cancelled\":\"1,3\"}\n"));
}

TEST(FormatLogfmtTest, BreakerTransitionLine) {
  EXPECT_EQ(FormatLogfmt(TransitionEvent()),
            "ts=2026-11-30T05:01:02.123456Z level=warn msg=rpcguard "
            "event=breaker breaker_key=payments:443 from=closed to=open "
            "message=\"failure rate 60% over 20 calls\"\n");
  TraceEvent e = TransitionEvent();
  e.call_id = 0xab;
  e.method = "/pkg.Svc/M";
  e.from_state = "open";
  e.to_state = "half_open";
  e.message.clear();
  EXPECT_EQ(FormatLogfmt(e),
            "ts=2026-11-30T05:01:02.123456Z level=info msg=rpcguard "
            "event=breaker call=ab method=/pkg.Svc/M "
            "breaker_key=payments:443 from=open to=half_open\n");
}

TEST(FormatLogfmtTest, QuotesAndEscapesValues) {
  TraceEvent e = GiveUpEvent();
  e.idempotency_key = "-";  // a literal "-" must not read as "none"
  e.breaker_key = "a=b";
  e.method = "/pkg.Svc/M x";
  e.message =
      std::string("say \"hi\"\tback\\slash\nnext\r\x01\x7f caf\xc3\xa9");
  EXPECT_EQ(FormatLogfmt(e),
            "ts=2026-11-30T05:01:02.123456Z level=warn msg=rpcguard "
            "event=attempt call=ffffffffffffffff method=\"/pkg.Svc/M x\" "
            "attempt=3 code=DEADLINE_EXCEEDED class=fatal decision=give_up "
            "reason=deadline backoff_ms=0 deadline_left_ms=inf breaker=- "
            "breaker_key=\"a=b\" key=\"-\" "
            "message=\"say \\\"hi\\\"\\tback\\\\slash\\nnext\\r\\u0001\\u007f "
            "caf\xc3\xa9\"\n");
}

TEST(FormatLogfmtTest, MillisecondsAreExactToTheMicrosecond) {
  const auto backoff = [](absl::Duration d) {
    TraceEvent e = RetryEvent();
    e.backoff = d;
    const std::string line = FormatLogfmt(e);
    const size_t at = line.find("backoff_ms=");
    return line.substr(at + 11, line.find(' ', at) - at - 11);
  };
  EXPECT_EQ(backoff(absl::ZeroDuration()), "0");
  EXPECT_EQ(backoff(absl::Microseconds(1)), "0.001");
  EXPECT_EQ(backoff(absl::Microseconds(10)), "0.01");
  EXPECT_EQ(backoff(absl::Milliseconds(25)), "25");
  EXPECT_EQ(backoff(absl::Microseconds(1234567)), "1234.567");
  EXPECT_EQ(backoff(-absl::Microseconds(1500)), "-1.5");
  EXPECT_EQ(backoff(absl::Nanoseconds(999)), "0");  // below the precision
}

TEST(FormatJsonTest, RetryLine) {
  EXPECT_EQ(FormatJson(RetryEvent()),
            "{\"ts\":\"2026-11-30T05:01:02.123456Z\",\"level\":\"info\","
            "\"msg\":\"rpcguard\",\"event\":\"attempt\",\"call\":\"1a2b\","
            "\"method\":\"/pkg.Svc/M\",\"attempt\":2,\"code\":\"UNAVAILABLE\","
            "\"class\":\"retriable\",\"decision\":\"retry\",\"reason\":null,"
            "\"backoff_ms\":12.3,\"deadline_left_ms\":480.1,"
            "\"breaker\":\"closed\",\"breaker_key\":\"payments:443\","
            "\"key\":\"0f8fad5b-d9cb-469f-a165-70867728950e\","
            "\"message\":\"server busy\"}\n");
}

TEST(FormatJsonTest, GiveUpAndTransition) {
  EXPECT_EQ(FormatJson(GiveUpEvent()),
            "{\"ts\":\"2026-11-30T05:01:02.123456Z\",\"level\":\"warn\","
            "\"msg\":\"rpcguard\",\"event\":\"attempt\","
            "\"call\":\"ffffffffffffffff\",\"method\":\"/pkg.Svc/M\","
            "\"attempt\":3,\"code\":\"DEADLINE_EXCEEDED\",\"class\":\"fatal\","
            "\"decision\":\"give_up\",\"reason\":\"deadline\","
            "\"backoff_ms\":0,\"deadline_left_ms\":null,\"breaker\":null,"
            "\"breaker_key\":null,\"key\":null}\n");
  EXPECT_EQ(
      FormatJson(TransitionEvent()),
      "{\"ts\":\"2026-11-30T05:01:02.123456Z\",\"level\":\"warn\","
      "\"msg\":\"rpcguard\",\"event\":\"breaker\","
      "\"breaker_key\":\"payments:443\",\"from\":\"closed\","
      "\"to\":\"open\",\"message\":\"failure rate 60% over 20 calls\"}\n");
}

TEST(FormatJsonTest, EscapesAndRepairsUtf8) {
  TraceEvent e = FailFastEvent();
  e.idempotency_key = "-";
  e.message = std::string(
      "q\"b\\s/\n\r\t\b\f\x01\x1f\x7f"
      "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"  // 2, 3, 4 byte sequences
      " bad:\xff\xc3(\xe2\x82 over:\xc0\xaf sur:\xed\xa0\x80 end\xe2");
  EXPECT_EQ(FormatJson(e),
            "{\"ts\":\"2026-11-30T05:01:02.123456Z\",\"level\":\"warn\","
            "\"msg\":\"rpcguard\",\"event\":\"fail_fast\",\"call\":\"7\","
            "\"method\":\"/pkg.Svc/M\",\"attempt\":1,\"code\":\"UNAVAILABLE\","
            "\"class\":null,\"decision\":\"give_up\","
            "\"reason\":\"breaker_open\",\"backoff_ms\":0,"
            "\"deadline_left_ms\":-1.5,\"breaker\":\"open\","
            "\"breaker_key\":\"payments:443\",\"key\":\"-\","
            "\"message\":\"q\\\"b\\\\s/\\n\\r\\t\\b\\f\\u0001\\u001f\x7f"
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"
            " bad:\\ufffd\\ufffd(\\ufffd\\ufffd over:\\ufffd\\ufffd"
            " sur:\\ufffd\\ufffd\\ufffd end\\ufffd\"}\n");
}

TEST(FormatCallIdTest, LowercaseHexWithoutLeadingZeros) {
  EXPECT_EQ(FormatCallId(0), "0");
  EXPECT_EQ(FormatCallId(0x1A2B), "1a2b");
  EXPECT_EQ(FormatCallId(0xffffffffffffffff), "ffffffffffffffff");
}

// The verbosity rules, one row per kind of event.
TEST(ShouldTraceTest, RulesTable) {
  struct Row {
    const char* what;
    TraceEvent::Kind kind;
    int attempt;
    TraceDecision decision;
    bool off, give_ups, retries, all;
  };
  using K = TraceEvent::Kind;
  using D = TraceDecision;
  const Row rows[] = {
      {"first-time success", K::kAttempt, 1, D::kDone, 0, 0, 0, 1},
      {"success after retries", K::kAttempt, 3, D::kDone, 0, 0, 1, 1},
      {"first attempt retried", K::kAttempt, 1, D::kRetry, 0, 0, 1, 1},
      {"later attempt retried", K::kAttempt, 2, D::kRetry, 0, 0, 1, 1},
      {"gave up at once", K::kAttempt, 1, D::kGiveUp, 0, 1, 1, 1},
      {"gave up after retries", K::kAttempt, 4, D::kGiveUp, 0, 1, 1, 1},
      {"fail-fast", K::kFailFast, 1, D::kGiveUp, 0, 1, 1, 1},
      {"fail-fast of a retry", K::kFailFast, 2, D::kGiveUp, 0, 1, 1, 1},
      {"breaker transition", K::kBreakerTransition, 0, D::kDone, 0, 1, 1, 1},
  };
  for (const Row& r : rows) {
    TraceEvent e;
    e.kind = r.kind;
    e.attempt = r.attempt;
    e.decision = r.decision;
    EXPECT_EQ(ShouldTrace(TraceVerbosity::kOff, e), r.off) << r.what;
    EXPECT_EQ(ShouldTrace(TraceVerbosity::kGiveUps, e), r.give_ups) << r.what;
    EXPECT_EQ(ShouldTrace(TraceVerbosity::kRetries, e), r.retries) << r.what;
    EXPECT_EQ(ShouldTrace(TraceVerbosity::kAll, e), r.all) << r.what;
  }
}

std::vector<TraceEvent> Call(std::vector<TraceDecision> decisions) {
  std::vector<TraceEvent> events;
  for (size_t i = 0; i < decisions.size(); ++i) {
    TraceEvent e;
    e.attempt = static_cast<int>(i) + 1;
    e.decision = decisions[i];
    events.push_back(e);
  }
  return events;
}

int Written(TraceVerbosity v, const std::vector<TraceEvent>& events) {
  int n = 0;
  for (const TraceEvent& e : events) n += ShouldTrace(v, e);
  return n;
}

TEST(ShouldTraceTest, DefaultShowsEveryAttemptOfACallThatRetried) {
  using D = TraceDecision;
  EXPECT_EQ(
      Written(TraceVerbosity::kRetries, Call({D::kRetry, D::kRetry, D::kDone})),
      3);
  EXPECT_EQ(Written(TraceVerbosity::kRetries,
                    Call({D::kRetry, D::kRetry, D::kGiveUp})),
            3);
  EXPECT_EQ(Written(TraceVerbosity::kGiveUps,
                    Call({D::kRetry, D::kRetry, D::kGiveUp})),
            1);
  EXPECT_EQ(
      Written(TraceVerbosity::kGiveUps, Call({D::kRetry, D::kRetry, D::kDone})),
      0);
}

// A hedged call: the copy sent is written at the default verbosity, and so
// is its end even when copy 1 won (it cancelled copies); at kGiveUps
// neither is.
TEST(ShouldTraceTest, HedgedCallsAreWrittenAtTheDefault) {
  TraceEvent sent;
  sent.kind = TraceEvent::Kind::kHedge;
  sent.decision = TraceDecision::kHedge;
  sent.attempt = 2;
  TraceEvent won;
  won.decision = TraceDecision::kDone;
  won.attempt = 1;
  won.copy = 1;
  won.cancelled = {2};
  EXPECT_TRUE(ShouldTrace(TraceVerbosity::kRetries, sent));
  EXPECT_TRUE(ShouldTrace(TraceVerbosity::kRetries, won));
  EXPECT_FALSE(ShouldTrace(TraceVerbosity::kGiveUps, sent));
  EXPECT_FALSE(ShouldTrace(TraceVerbosity::kGiveUps, won));
  EXPECT_TRUE(ShouldTrace(TraceVerbosity::kAll, sent));
}

TEST(ShouldTraceTest, DefaultWritesNothingForAFirstTimeSuccess) {
  EXPECT_EQ(Written(TraceVerbosity::kRetries, Call({TraceDecision::kDone})), 0);
  EXPECT_EQ(Written(TraceVerbosity::kAll, Call({TraceDecision::kDone})), 1);
}

std::string ReadAll(FILE* f) {
  std::string out;
  rewind(f);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  return out;
}

TEST(LogfmtSinkTest, WritesOneLinePerEvent) {
  FILE* f = tmpfile();
  ASSERT_NE(f, nullptr);
  LogfmtSink sink(f);
  sink.Write(RetryEvent());
  sink.Write(GiveUpEvent());
  EXPECT_EQ(ReadAll(f),
            FormatLogfmt(RetryEvent()) + FormatLogfmt(GiveUpEvent()));
  fclose(f);
}

TEST(JsonLinesSinkTest, WritesToAStream) {
  std::ostringstream out;
  JsonLinesSink sink(out);
  sink.Write(RetryEvent());
  sink.Write(TransitionEvent());
  EXPECT_EQ(out.str(),
            FormatJson(RetryEvent()) + FormatJson(TransitionEvent()));
}

TEST(JsonLinesSinkTest, OpensAndAppendsToAFile) {
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/trace_test_sink.jsonl");
  std::remove(path.c_str());
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<JsonLinesSink>> sink =
        JsonLinesSink::Open(path);
    ASSERT_TRUE(sink.ok()) << sink.status();
    (*sink)->Write(RetryEvent());
  }
  FILE* f = fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(ReadAll(f), FormatJson(RetryEvent()) + FormatJson(RetryEvent()));
  fclose(f);
}

TEST(JsonLinesSinkTest, OpenReportsAPathItCannotOpen) {
  absl::StatusOr<std::unique_ptr<JsonLinesSink>> sink =
      JsonLinesSink::Open("/nonexistent-dir/trace.jsonl");
  EXPECT_EQ(sink.status(),
            absl::InvalidArgumentError(
                "cannot open trace file /nonexistent-dir/trace.jsonl"));
}

TEST(CallbackSinkTest, HandsOverEveryEvent) {
  std::vector<uint64_t> ids;
  CallbackSink sink([&](const TraceEvent& e) { ids.push_back(e.call_id); });
  sink.Write(RetryEvent());
  sink.Write(FailFastEvent());
  EXPECT_THAT(ids, ElementsAre(0x1a2b, 7));
}

// Writes `per_thread` events from each of 8 threads, each thread with its own
// call id and a long message, and checks every line came out whole.
void ConcurrentWrites(TraceSink& sink, const std::function<std::string()>& read,
                      std::string (*format)(const TraceEvent&)) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 300;
  std::vector<TraceEvent> events(kThreads);
  std::set<std::string> expected;
  for (int t = 0; t < kThreads; ++t) {
    events[t] = RetryEvent();
    events[t].call_id = 1000 + t;
    events[t].message = std::string(2000, static_cast<char>('a' + t));
    expected.insert(format(events[t]));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) sink.Write(events[t]);
    });
  }
  for (std::thread& th : threads) th.join();

  std::vector<std::string> lines =
      absl::StrSplit(read(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), kThreads * kPerThread);
  std::map<std::string, int> counts;
  for (const std::string& line : lines) {
    ASSERT_EQ(expected.count(line + "\n"), 1u)
        << "torn line: " << line.substr(0, 200);
    ++counts[line];
  }
  for (const auto& [line, n] : counts) EXPECT_EQ(n, kPerThread);
}

TEST(LogfmtSinkTest, ConcurrentWritersProduceWholeLines) {
  FILE* f = tmpfile();
  ASSERT_NE(f, nullptr);
  LogfmtSink sink(f);
  ConcurrentWrites(
      sink, [f] { return ReadAll(f); }, &FormatLogfmt);
  fclose(f);
}

TEST(JsonLinesSinkTest, ConcurrentWritersProduceWholeLines) {
  std::ostringstream out;
  JsonLinesSink sink(out);
  ConcurrentWrites(
      sink, [&out] { return out.str(); }, &FormatJson);
}

}  // namespace
}  // namespace rpcguard
