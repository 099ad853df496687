// Copyright rpcguard authors.

#include "tools/trace_reader.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpcguard/observability/trace.h"

namespace rpcguard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::StartsWith;

const absl::Time kT0 = absl::FromCivil(absl::CivilSecond(2026, 11, 30, 5, 1, 2),
                                       absl::UTCTimeZone()) +
                       absl::Microseconds(123456);

void ExpectSameEvent(const TraceEvent& a, const TraceEvent& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.time, b.time);
  EXPECT_EQ(a.call_id, b.call_id);
  EXPECT_EQ(a.method, b.method);
  EXPECT_EQ(a.attempt, b.attempt);
  EXPECT_EQ(a.code, b.code);
  // A fail-fast's class is not written: nothing was sent to be answered.
  // Nor is a copy just sent's (hedge): nothing was answered yet.
  if (a.kind != TraceEvent::Kind::kFailFast &&
      a.kind != TraceEvent::Kind::kHedge) {
    EXPECT_EQ(a.status_class, b.status_class);
  }
  EXPECT_EQ(a.decision, b.decision);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.backoff, b.backoff);
  EXPECT_EQ(a.deadline_left, b.deadline_left);
  EXPECT_EQ(a.breaker_key, b.breaker_key);
  EXPECT_EQ(a.breaker_state, b.breaker_state);
  EXPECT_EQ(a.idempotency_key, b.idempotency_key);
  EXPECT_EQ(a.from_state, b.from_state);
  EXPECT_EQ(a.to_state, b.to_state);
  EXPECT_EQ(a.copy, b.copy);
  EXPECT_EQ(a.cancelled, b.cancelled);
  EXPECT_EQ(a.trace_id, b.trace_id);
  EXPECT_EQ(a.correlation, b.correlation);
  EXPECT_EQ(a.message, b.message);
}

TraceEvent AttemptEvent(uint64_t call, const std::string& method, int attempt,
                        grpc::StatusCode code, StatusClass cls,
                        TraceDecision decision, absl::Duration at,
                        absl::Duration backoff = absl::ZeroDuration(),
                        GiveUpReason reason = GiveUpReason::kNone) {
  TraceEvent e;
  e.time = kT0 + at;
  e.call_id = call;
  e.method = method;
  e.attempt = attempt;
  e.code = code;
  e.status_class = cls;
  e.decision = decision;
  e.reason = reason;
  e.backoff = backoff;
  e.deadline_left = absl::Milliseconds(500) - at;
  e.breaker_key = "payments:443";
  e.breaker_state = "closed";
  e.idempotency_key = absl::StrCat("key-", call);
  if (code != grpc::StatusCode::OK) e.message = "injected failure";
  return e;
}

// Events that exercise every field and every kind of escaping.
std::vector<TraceEvent> VariedEvents() {
  std::vector<TraceEvent> events;
  TraceEvent e =
      AttemptEvent(0x1a2b, "/pkg.Svc/M", 2, grpc::StatusCode::UNAVAILABLE,
                   StatusClass::kRetriable, TraceDecision::kRetry,
                   absl::ZeroDuration(), absl::Microseconds(12345));
  events.push_back(e);

  e.decision = TraceDecision::kGiveUp;
  e.reason = GiveUpReason::kPushbackStop;
  e.deadline_left = absl::InfiniteDuration();
  e.backoff = absl::ZeroDuration();
  e.call_id = 0xffffffffffffffff;
  e.idempotency_key = "-";  // the literal text, not "none"
  e.breaker_key.clear();
  e.breaker_state.clear();
  e.method = "/pkg.Svc/With space=and\"quote";
  e.message =
      "say \"hi\"\tback\\slash\nnext\r\x01\x7f caf\xc3\xa9 \xf0\x9f\x98\x80";
  events.push_back(e);

  e.kind = TraceEvent::Kind::kFailFast;
  e.reason = GiveUpReason::kBreakerOpen;
  e.attempt = 1;
  e.deadline_left = -absl::Microseconds(1500);
  e.message.clear();
  e.idempotency_key.clear();
  events.push_back(e);

  TraceEvent t;
  t.kind = TraceEvent::Kind::kBreakerTransition;
  t.time = kT0 + absl::Seconds(1);
  t.breaker_key = "payments:443";
  t.from_state = "closed";
  t.to_state = "open";
  t.message = "failure rate 60% over 20 calls";
  events.push_back(t);
  t.call_id = 0xabc;
  t.method = "/pkg.Svc/M";
  t.message.clear();
  events.push_back(t);

  for (GiveUpReason r : {GiveUpReason::kMaxAttempts, GiveUpReason::kAuth,
                         GiveUpReason::kNotIdempotent, GiveUpReason::kCancelled,
                         GiveUpReason::kBudgetExhausted}) {
    TraceEvent g = AttemptEvent(
        7, "/a.B/C", 3, grpc::StatusCode::PERMISSION_DENIED, StatusClass::kAuth,
        TraceDecision::kGiveUp, absl::Milliseconds(3), absl::ZeroDuration(), r);
    events.push_back(g);
  }
  TraceEvent done =
      AttemptEvent(8, "/a.B/C", 1, grpc::StatusCode::OK, StatusClass::kOk,
                   TraceDecision::kDone, absl::Milliseconds(1));
  events.push_back(done);

  // A hedged call: a copy sent, and an end that names copies.
  TraceEvent hedge = AttemptEvent(
      9, "/a.B/C", 2, grpc::StatusCode::OK, StatusClass::kOk,
      TraceDecision::kHedge, absl::Milliseconds(30), absl::Microseconds(30125));
  hedge.kind = TraceEvent::Kind::kHedge;
  events.push_back(hedge);
  TraceEvent won =
      AttemptEvent(9, "/a.B/C", 3, grpc::StatusCode::OK, StatusClass::kOk,
                   TraceDecision::kDone, absl::Milliseconds(35));
  won.copy = 2;
  won.cancelled = {1, 3};
  events.push_back(won);

  // A caller's correlation ids, with values a logfmt writer must quote.
  TraceEvent ids = AttemptEvent(10, "/a.B/C", 1, grpc::StatusCode::UNAVAILABLE,
                                StatusClass::kRetriable, TraceDecision::kRetry,
                                absl::Milliseconds(40), absl::Milliseconds(5));
  ids.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  ids.correlation = {{"x-request-id", "r=7\"q\\"}, {"x-b3", "a:b"}};
  events.push_back(ids);
  ids.kind = TraceEvent::Kind::kFailFast;
  ids.trace_id.clear();
  events.push_back(ids);
  return events;
}

TEST(ParseTraceLineTest, LogfmtRoundTrip) {
  for (const TraceEvent& e : VariedEvents()) {
    const std::string line = FormatLogfmt(e);
    absl::StatusOr<TraceEvent> parsed = ParseTraceLine(line);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << line;
    ExpectSameEvent(*parsed, e);
  }
}

TEST(ParseTraceLineTest, JsonRoundTrip) {
  for (const TraceEvent& e : VariedEvents()) {
    const std::string line = FormatJson(e);
    absl::StatusOr<TraceEvent> parsed = ParseTraceLine(line);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << line;
    ExpectSameEvent(*parsed, e);
  }
}

TEST(ParseTraceLineTest, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  TraceEvent e = VariedEvents()[0];
  e.message = std::string("bin\xff\xfe\0ary", 9);
  // Both formats keep every line valid text: such bytes become U+FFFD.
  const std::string line = FormatLogfmt(e);
  EXPECT_TRUE(
      absl::StrContains(line, "message=\"bin\\ufffd\\ufffd\\u0000ary\""))
      << line;
  for (const std::string& text : {line, FormatJson(e)}) {
    absl::StatusOr<TraceEvent> parsed = ParseTraceLine(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->message,
              std::string("bin\xef\xbf\xbd\xef\xbf\xbd\0ary", 13));
  }
}

TEST(ParseTraceLineTest, ReadsLinesBehindACollectorPrefix) {
  const TraceEvent e = VariedEvents()[0];
  std::string line = FormatLogfmt(e);
  line.pop_back();
  absl::StatusOr<TraceEvent> parsed = ParseTraceLine(absl::StrCat(
      "2026-11-30T05:01:02.5Z stderr F \"quoted word\" file.cc:12] ", line,
      "\r\n"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameEvent(*parsed, e);
  parsed = ParseTraceLine(absl::StrCat("app[{1}] | ", FormatJson(e)));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameEvent(*parsed, e);
}

TEST(ParseTraceLineTest, AcceptsJsonWithSpacesAndUnknownMembers) {
  absl::StatusOr<TraceEvent> parsed = ParseTraceLine(
      R"( { "extra" : [1, {"x": null}, "s"], "msg" : "rpcguard", )"
      R"("event":"breaker", "ts":"2026-11-30T05:01:02Z", "breaker_key":"k",)"
      R"( "from":"open", "to":"half_open", "message":"\u00e9\ud83d\ude00" } )");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->kind, TraceEvent::Kind::kBreakerTransition);
  EXPECT_EQ(parsed->to_state, "half_open");
  EXPECT_EQ(parsed->message, "\xc3\xa9\xf0\x9f\x98\x80");
}

TEST(ParseTraceLineTest, OtherLinesAreNotFound) {
  for (absl::string_view line : {
           "",
           "I1130 05:01:02.123456 1234 main.cc:42] starting server",
           "ts=2026-11-30T05:01:02Z level=info msg=\"user login\" user=bob",
           "ts=2026-11-30T05:01:02Z level=info msg=rpcguardian call=1",
           "xmsg=rpcguard call=1",
           "{\"level\":\"info\",\"msg\":\"hello\"}",
           "{\"msg\":\"rpcguard-like\"}",
           "unbalanced \"quote and no marker",
       }) {
    EXPECT_TRUE(absl::IsNotFound(ParseTraceLine(line).status())) << line;
  }
}

TEST(ParseTraceLineTest, BrokenEventLinesSayWhy) {
  const std::string good = FormatLogfmt(VariedEvents()[0]);
  const auto error = [](absl::string_view line) {
    absl::StatusOr<TraceEvent> e = ParseTraceLine(line);
    EXPECT_TRUE(absl::IsInvalidArgument(e.status())) << e.status();
    return std::string(e.status().message());
  };
  EXPECT_EQ(error(good.substr(0, good.size() - 6)),
            "unterminated quoted string in message");
  EXPECT_EQ(error(good.substr(0, good.find(" attempt="))),
            "missing field attempt");
  EXPECT_EQ(error(absl::StrReplaceAll(good, {{"UNAVAILABLE", "BOGUS"}})),
            "bad code=BOGUS");
  EXPECT_EQ(error(absl::StrReplaceAll(good, {{"call=1a2b", "call=xyz"}})),
            "bad call=xyz");
  EXPECT_EQ(error(absl::StrReplaceAll(
                good, {{"backoff_ms=12.345", "backoff_ms=nan"}})),
            "bad backoff_ms=nan");
  EXPECT_EQ(error(absl::StrReplaceAll(good, {{"ts=2026", "ts=x2026"}})),
            "bad ts=x2026-11-30T05:01:02.123456Z");
  EXPECT_EQ(error("msg=rpcguard event=bogus"), "bad event=bogus");
  EXPECT_EQ(error("msg=rpcguard"), "missing field event");

  const std::string json = FormatJson(VariedEvents()[0]);
  EXPECT_THAT(error(json.substr(0, json.size() / 2)), StartsWith("bad JSON: "));
  EXPECT_EQ(
      error(absl::StrReplaceAll(json, {{"\"attempt\":2", "\"attempt\":-2"}})),
      "bad attempt=-2");
}

TEST(ParseTraceLineTest, SurvivesHostileInput) {
  std::mt19937 rng(42);
  std::vector<std::string> lines;
  for (const TraceEvent& e : VariedEvents()) {
    lines.push_back(FormatLogfmt(e));
    lines.push_back(FormatJson(e));
  }
  // Every prefix of every line: a log cut anywhere.
  for (const std::string& line : lines) {
    for (size_t n = 0; n < line.size(); ++n) {
      absl::StatusOr<TraceEvent> e = ParseTraceLine(line.substr(0, n));
      if (n + 2 <= line.size() && line[0] == '{') {
        EXPECT_FALSE(e.ok()) << line.substr(0, n);  // JSON needs its '}'
      }
    }
  }
  // Random byte flips of real lines, and random bytes.
  for (int i = 0; i < 20000; ++i) {
    std::string line = lines[rng() % lines.size()];
    for (int k = rng() % 4; k >= 0; --k) {
      line[rng() % line.size()] = static_cast<char>(rng());
    }
    (void)ParseTraceLine(line);
    std::string noise(rng() % 200, '\0');
    for (char& c : noise) c = static_cast<char>(rng());
    if (i % 2 == 0) noise += " msg=rpcguard \"";
    (void)ParseTraceLine(noise);
  }
  // Deep nesting must not overflow the stack.
  const std::string deep = absl::StrCat(
      "{\"msg\":\"rpcguard\",\"x\":", std::string(100000, '['), "}");
  EXPECT_THAT(std::string(ParseTraceLine(deep).status().message()),
              HasSubstr("nested too deep"));
  const std::string deep_objects = absl::StrCat(
      "{\"msg\":\"rpcguard\",\"x\":",
      absl::StrJoin(std::vector<std::string>(50000, "{\"a\":"), ""));
  EXPECT_FALSE(ParseTraceLine(deep_objects).ok());
}

TEST(ParseCallIdTest, HexOfOneToSixteenDigits) {
  EXPECT_EQ(ParseCallId("1a2B"), 0x1a2bu);
  EXPECT_EQ(ParseCallId("ffffffffffffffff"), 0xffffffffffffffffu);
  EXPECT_EQ(ParseCallId(""), std::nullopt);
  EXPECT_EQ(ParseCallId("10000000000000000"), std::nullopt);
  EXPECT_EQ(ParseCallId("0x1"), std::nullopt);
  EXPECT_EQ(ParseCallId("-1"), std::nullopt);
}

// A log as a service writes it: two processes' rpcguard lines, one logfmt
// and one JSON, among other lines and damage.
std::vector<std::string> ScenarioLog() {
  using C = grpc::StatusCode;
  using S = StatusClass;
  using D = TraceDecision;
  const auto ms = [](double v) { return absl::Microseconds(v * 1000); };
  const std::string get = "/pkg.Svc/Get";
  const std::string put = "/pkg.Svc/Put";
  std::vector<TraceEvent> logfmt_events = {
      AttemptEvent(0xa1, get, 1, C::UNAVAILABLE, S::kRetriable, D::kRetry,
                   ms(0), ms(10)),
      AttemptEvent(0xa3, get, 1, C::NOT_FOUND, S::kFatal, D::kGiveUp, ms(2),
                   ms(0), GiveUpReason::kFatal),
      AttemptEvent(0xa1, get, 2, C::UNAVAILABLE, S::kRetriable, D::kRetry,
                   ms(15), ms(20)),
      AttemptEvent(0xa1, get, 3, C::OK, S::kOk, D::kDone, ms(40)),
  };
  TraceEvent fail_fast =
      AttemptEvent(0xb1, put, 1, C::UNAVAILABLE, S::kRetriable, D::kGiveUp,
                   ms(50), ms(0), GiveUpReason::kBreakerOpen);
  fail_fast.kind = TraceEvent::Kind::kFailFast;
  fail_fast.breaker_state = "open";
  logfmt_events.push_back(fail_fast);

  TraceEvent opened;
  opened.kind = TraceEvent::Kind::kBreakerTransition;
  opened.time = kT0 + ms(45);
  opened.breaker_key = "payments:443";
  opened.from_state = "closed";
  opened.to_state = "open";
  TraceEvent half_open = opened;
  half_open.time = kT0 + ms(100);
  half_open.from_state = "open";
  half_open.to_state = "half_open";
  std::vector<TraceEvent> json_events = {
      AttemptEvent(0xa2, get, 1, C::UNAVAILABLE, S::kRetriable, D::kRetry,
                   ms(1), ms(10)),
      AttemptEvent(0xa2, get, 2, C::DEADLINE_EXCEEDED, S::kFatal, D::kGiveUp,
                   ms(30), ms(0), GiveUpReason::kDeadline),
      opened,
      AttemptEvent(0xb2, put, 1, C::UNAVAILABLE, S::kRetriable, D::kRetry,
                   ms(60), ms(5)),
      half_open,
  };

  // Written by the real sinks.
  FILE* f = tmpfile();
  {
    LogfmtSink sink(f);
    for (const TraceEvent& e : logfmt_events) sink.Write(e);
  }
  std::string logfmt_text;
  rewind(f);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) logfmt_text.append(buf, n);
  fclose(f);
  std::ostringstream json_text;
  {
    JsonLinesSink sink(json_text);
    for (const TraceEvent& e : json_events) sink.Write(e);
  }

  std::vector<std::string> a =
      absl::StrSplit(logfmt_text, '\n', absl::SkipEmpty());
  std::vector<std::string> b =
      absl::StrSplit(json_text.str(), '\n', absl::SkipEmpty());
  std::vector<std::string> noise = {
      "I1130 05:01:02.123456 1234 main.cc:42] starting server",
      "ts=2026-11-30T05:01:02Z level=info msg=\"user login\" user=bob",
      "{\"level\":\"info\",\"msg\":\"hello\"}",
      std::string("\x00\xff\xfe binary \x01\x02", 12),
      "",
  };
  std::vector<std::string> log;
  for (size_t i = 0; i < std::max({a.size(), b.size(), noise.size()}); ++i) {
    if (i < noise.size()) log.push_back(noise[i]);
    if (i < a.size()) log.push_back(a[i]);
    if (i < b.size()) log.push_back(b[i]);
  }
  // Damage: a logfmt line cut short, a JSON line cut short, garbage that
  // claims to be an event.
  log.push_back(a[0].substr(0, a[0].size() - 10));
  log.push_back(b[0].substr(0, b[0].size() / 2));
  log.push_back(std::string("\x7f\x45 msg=rpcguard \x00\x01", 17));
  return log;
}

TraceReader ReadScenario(ReaderOptions options = {}) {
  TraceReader reader(options);
  int64_t n = 0;
  for (const std::string& line : ScenarioLog()) {
    reader.AddLine(line, "app.log", ++n);
  }
  return reader;
}

TEST(TraceReaderTest, CountsLinesEventsAndUnparsableLines) {
  TraceReader reader = ReadScenario();
  EXPECT_EQ(reader.lines(), 18);
  EXPECT_EQ(reader.events(), 10);
  EXPECT_EQ(reader.unparsable(), 3);
  EXPECT_THAT(
      reader.unparsable_examples(),
      ElementsAre("app.log:16: unterminated quoted string in message",
                  "app.log:17: bad JSON: unterminated string at byte 170",
                  "app.log:18: missing field event"));
}

TEST(TraceReaderTest, SummarisesPerMethod) {
  TraceReader reader = ReadScenario();
  std::vector<MethodSummary> methods = reader.Methods();
  ASSERT_EQ(methods.size(), 2u);

  const MethodSummary& get = methods[0];
  EXPECT_EQ(get.method, "/pkg.Svc/Get");
  EXPECT_EQ(get.calls, 3);
  EXPECT_EQ(get.done, 1);
  EXPECT_EQ(get.gave_up, 2);
  EXPECT_EQ(get.incomplete, 0);
  EXPECT_EQ(get.attempts, 6);
  EXPECT_EQ(get.retries, 3);
  EXPECT_EQ(get.retried_calls, 2);
  EXPECT_THAT(get.attempts_per_call,
              ElementsAre(Pair(1, 1), Pair(2, 1), Pair(3, 1)));
  EXPECT_THAT(get.give_ups, ElementsAre(Pair("deadline", 1), Pair("fatal", 1)));
  EXPECT_THAT(get.fail_fasts, IsEmpty());
  EXPECT_EQ(get.total_backoff, absl::Milliseconds(40));

  const MethodSummary& put = methods[1];
  EXPECT_EQ(put.method, "/pkg.Svc/Put");
  EXPECT_EQ(put.calls, 2);
  EXPECT_EQ(put.gave_up, 1);
  EXPECT_EQ(put.incomplete, 1);
  EXPECT_EQ(put.attempts, 1);
  EXPECT_EQ(put.retried_calls, 1);
  EXPECT_THAT(put.attempts_per_call, ElementsAre(Pair(0, 1)));
  EXPECT_THAT(put.give_ups, ElementsAre(Pair("breaker_open", 1)));
  EXPECT_THAT(put.fail_fasts, ElementsAre(Pair("breaker_open", 1)));

  EXPECT_THAT(reader.breaker_transitions(),
              ElementsAre(Pair("payments:443",
                               ElementsAre(Pair("closed->open", 1),
                                           Pair("open->half_open", 1)))));
}

TEST(TraceReaderTest, SummaryText) {
  EXPECT_EQ(ReadScenario().Summary(),
            R"(rpcguard trace: 18 lines, 10 events, 3 unparsable

/pkg.Svc/Get
  calls          3 (done 1, gave up 2, incomplete 0)
  attempts       6 (retries 3, 50.0% of attempts)
  retried calls  2 (66.7% of calls)
  attempts/call  1:1 2:1 3:1
  gave up        deadline 1, fatal 1
  failed fast    -
  total backoff  40.0 ms

/pkg.Svc/Put
  calls          2 (done 0, gave up 1, incomplete 1)
  attempts       1 (retries 1, 100.0% of attempts)
  retried calls  1 (50.0% of calls)
  attempts/call  0:1
  gave up        breaker_open 1
  failed fast    breaker_open 1
  total backoff  5.0 ms

breaker transitions
  payments:443  closed->open 1, open->half_open 1

slowest calls (first to last event)
  call  method        attempts  span_ms  backoff_ms  outcome               deadline_left_ms
  a1    /pkg.Svc/Get  3         40.0     30.0        done                  460.0
  a2    /pkg.Svc/Get  2         29.0     10.0        give_up:deadline      470.0
  b2    /pkg.Svc/Put  1         0.0      5.0         incomplete            440.0
  a3    /pkg.Svc/Get  1         0.0      0.0         give_up:fatal         498.0
  b1    /pkg.Svc/Put  0         0.0      0.0         give_up:breaker_open  450.0

unparsable lines: 3
  app.log:16: unterminated quoted string in message
  app.log:17: bad JSON: unterminated string at byte 170
  app.log:18: missing field event

note: at the default verbosity (retries) a call whose first attempt succeeded writes nothing,
so it is not counted here; use the stats for totals.
)");
}

TEST(TraceReaderTest, TimelineOfOneCall) {
  ReaderOptions options;
  options.call_id = 0xa2;
  TraceReader reader = ReadScenario(options);
  EXPECT_TRUE(reader.found_call());
  EXPECT_EQ(reader.Timeline(), R"(call a2  /pkg.Svc/Get  key=key-162
  first event at 2026-11-30T05:01:02.124456Z
  +ms   event      code               class      decision          backoff_ms  deadline_left_ms  breaker  message
  0.0   attempt 1  UNAVAILABLE        retriable  retry             10.0        499.0             closed   injected failure
  29.0  attempt 2  DEADLINE_EXCEEDED  fatal      give_up:deadline              470.0             closed   injected failure
  result: gave up (deadline) after 2 attempts, final code DEADLINE_EXCEEDED; 10.0 ms of backoff; 29.0 ms from first to last event
)");
}

// A hedged call: copy 1 slow, copy 2 sent at 30 ms fails at once, copy 3
// sent right after it wins at 45 ms and copy 1 is cancelled. The timeline
// lists the copies sent and draws them side by side.
TEST(TraceReaderTest, TimelineOfAHedgedCallShowsOverlappingCopies) {
  const std::string kMethod = "/pkg.Svc/Get";
  std::vector<TraceEvent> events;
  TraceEvent h2 = AttemptEvent(0xb1, kMethod, 2, grpc::StatusCode::OK,
                               StatusClass::kOk, TraceDecision::kHedge,
                               absl::Milliseconds(30), absl::Milliseconds(30));
  h2.kind = TraceEvent::Kind::kHedge;
  events.push_back(h2);
  events.push_back(AttemptEvent(0xb1, kMethod, 2, grpc::StatusCode::UNAVAILABLE,
                                StatusClass::kRetriable, TraceDecision::kHedge,
                                absl::Milliseconds(32)));
  TraceEvent h3 = h2;
  h3.attempt = 3;
  h3.time = kT0 + absl::Milliseconds(32);
  h3.backoff = absl::Milliseconds(32);
  h3.deadline_left = absl::Milliseconds(468);
  events.push_back(h3);
  TraceEvent won =
      AttemptEvent(0xb1, kMethod, 3, grpc::StatusCode::OK, StatusClass::kOk,
                   TraceDecision::kDone, absl::Milliseconds(40));
  won.copy = 3;
  won.cancelled = {1};
  events.push_back(won);

  ReaderOptions options;
  options.call_id = 0xb1;
  TraceReader reader(options);
  int n = 0;
  for (const TraceEvent& e : events) {
    reader.AddLine(FormatLogfmt(e), "app.log", ++n);
  }
  EXPECT_EQ(reader.unparsable(), 0);
  EXPECT_EQ(reader.Timeline(), R"(call b1  /pkg.Svc/Get  key=key-177
  first event at 2026-11-30T05:01:02.153456Z
  +ms   event               code         class      decision  backoff_ms  deadline_left_ms  breaker  message
  0.0   hedge: copy 2 sent                                                470.0             closed   30.0 ms after copy 1
  2.0   attempt 2           UNAVAILABLE  retriable  hedge                 468.0             closed   injected failure
  2.0   hedge: copy 3 sent                                                468.0             closed   32.0 ms after copy 1
  10.0  attempt 3           OK           ok         done                  460.0             closed   copy 3 won, cancelled 1
  result: done after 3 attempts; 0.0 ms of backoff; 10.0 ms from first to last event
  copies (one mark = 1.0 ms)
    copy 1  ########################################  0.0-40.0 ms   cancelled
    copy 2  ..............................##          30.0-32.0 ms  UNAVAILABLE
    copy 3  ................................########  32.0-40.0 ms  OK (won)
)");
  std::vector<MethodSummary> methods = reader.Methods();
  ASSERT_EQ(methods.size(), 1u);
  EXPECT_EQ(methods[0].hedges, 2);
  EXPECT_EQ(methods[0].attempts, 2);  // the two attempt lines
  EXPECT_EQ(methods[0].calls, 1);
  EXPECT_EQ(methods[0].done, 1);
}

TEST(ParseTraceLineTest, BadCopyFieldsSayWhy) {
  TraceEvent won =
      AttemptEvent(1, "/a.B/C", 2, grpc::StatusCode::OK, StatusClass::kOk,
                   TraceDecision::kDone, absl::ZeroDuration());
  won.cancelled = {1};
  const std::string line = FormatLogfmt(won);
  for (const auto& [from, to, why] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"cancelled=1", "cancelled=1,x", "bad cancelled=1,x"},
           {"cancelled=1", "cancelled=0", "bad cancelled=0"},
           {"cancelled=1", "cancelled=1 copy=-2", "bad copy=-2"}}) {
    const std::string bad = absl::StrReplaceAll(line, {{from, to}});
    absl::StatusOr<TraceEvent> parsed = ParseTraceLine(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().message(), why);
  }
}

TEST(MatchesCorrelationTest, TraceIdValueOrKeyValue) {
  TraceEvent e;
  e.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  e.correlation = {{"x-request-id", "r-7"}};
  EXPECT_TRUE(MatchesCorrelation(e, "4bf92f3577b34da6a3ce929d0e0e4736"));
  EXPECT_TRUE(MatchesCorrelation(e, "4BF92F3577B34DA6A3CE929D0E0E4736"));
  EXPECT_TRUE(MatchesCorrelation(e, "r-7"));
  EXPECT_TRUE(MatchesCorrelation(e, "x-request-id:r-7"));
  EXPECT_FALSE(MatchesCorrelation(e, "x-other:r-7"));
  EXPECT_FALSE(MatchesCorrelation(e, "r-"));
  EXPECT_FALSE(MatchesCorrelation(e, "4bf92f3577b34da6"));
  EXPECT_FALSE(MatchesCorrelation(e, ""));
  EXPECT_FALSE(MatchesCorrelation(TraceEvent(), ""));
}

// --correlation: only the calls carrying the id are summarised; breaker
// lines and other calls are skipped and counted.
TEST(TraceReaderTest, CorrelationFilterKeepsOnlyMatchingCalls) {
  ReaderOptions options;
  options.correlation = "r-7";
  TraceReader reader(options);
  TraceEvent a = AttemptEvent(1, "/a.B/C", 1, grpc::StatusCode::UNAVAILABLE,
                              StatusClass::kRetriable, TraceDecision::kRetry,
                              absl::ZeroDuration(), absl::Milliseconds(5));
  a.correlation = {{"x-request-id", "r-7"}};
  TraceEvent a2 = a;
  a2.attempt = 2;
  a2.code = grpc::StatusCode::OK;
  a2.status_class = StatusClass::kOk;
  a2.decision = TraceDecision::kDone;
  TraceEvent other = a;
  other.call_id = 2;
  other.correlation = {{"x-request-id", "r-8"}};
  TraceEvent none = a;
  none.call_id = 3;
  none.correlation.clear();
  TraceEvent breaker;
  breaker.kind = TraceEvent::Kind::kBreakerTransition;
  breaker.breaker_key = "payments:443";
  breaker.from_state = "closed";
  breaker.to_state = "open";
  for (const TraceEvent& e : {a, other, none, breaker, a2}) {
    reader.AddLine(FormatLogfmt(e));
  }
  EXPECT_EQ(reader.lines(), 5);
  EXPECT_EQ(reader.events(), 2);
  EXPECT_EQ(reader.skipped(), 3);
  std::vector<MethodSummary> methods = reader.Methods();
  ASSERT_EQ(methods.size(), 1u);
  EXPECT_EQ(methods[0].calls, 1);
  EXPECT_EQ(methods[0].done, 1);
  EXPECT_TRUE(reader.breaker_transitions().empty());
  EXPECT_THAT(reader.Summary(),
              ::testing::HasSubstr(
                  "\ncorrelation r-7: 3 events of other calls skipped\n"));
}

TEST(TraceReaderTest, TimelineOfAnUnknownCall) {
  ReaderOptions options;
  options.call_id = 0x999;
  TraceReader reader = ReadScenario(options);
  EXPECT_FALSE(reader.found_call());
  EXPECT_EQ(reader.Timeline(), "call 999: no events found\n");
}

}  // namespace
}  // namespace rpcguard
