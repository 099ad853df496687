// Copyright rpcguard authors.
//
// Retry traces: what rpcguard tried for a call, what came back, what it
// decided and why, as events a person can read in a log.
//
// The interceptor describes every step of a call with a TraceEvent:
//
//   kAttempt           an attempt ended, and rpcguard decided what comes next
//                      (retry after a backoff, give up, or done);
//   kFailFast          the call ended without sending the attempt it was about
//                      to send (breaker open, retry budget exhausted, the
//                      deadline passed or the caller cancelled during a
//                      backoff, an invalid request);
//   kHedge             a hedged call sent one more copy while others run
//                      (or right after one failed);
//   kBreakerTransition a circuit breaker changed state.
//
// Every call ends with exactly one terminal event: a kAttempt whose decision
// is kDone or kGiveUp, or a kFailFast. Events of one call share its call id,
// so one grep for `call=1a2b` shows the whole call.
//
// The interceptor asks ShouldTrace() whether the configured verbosity wants an
// event and, if so, hands it to a TraceSink. Shipped sinks:
//
//   LogfmtSink     one logfmt line per event (stderr by default):
//     ts=2026-11-30T05:01:02.123456Z level=info msg=rpcguard event=attempt
//     call=1a2b method=/pkg.Svc/M attempt=2 code=UNAVAILABLE class=retriable
//     decision=retry reason=- backoff_ms=12.3 deadline_left_ms=480.1
//     breaker=closed breaker_key=payments:443 key=0f8fad5b-...
//     trace_id=4bf92f3577b34da6a3ce929d0e0e4736 correlation=x-request-id:r-7
//     message="busy"
//   JsonLinesSink  the same fields as one JSON object per line;
//   CallbackSink   hands events to a function (forward to your own logger).
//
// Sinks are called on gRPC's threads, concurrently, by many calls at once.
// None of them holds a lock shared by all sinks: each formats the line with
// no lock held and then holds only its own stream's lock for one write.
//
// The line formats are a stable interface: tools/trace_reader.h parses them
// back (the round trip is tested), and people grep them.

#ifndef RPCGUARD_OBSERVABILITY_TRACE_H_
#define RPCGUARD_OBSERVABILITY_TRACE_H_

#include <grpcpp/support/status_code_enum.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rpcguard/decision/commit_reason.h"
#include "rpcguard/decision/give_up_reason.h"
#include "rpcguard/decision/status_class.h"

namespace rpcguard {

// What rpcguard decided after an attempt.
enum class TraceDecision {
  kDone,    // the call succeeded; nothing more to do
  kRetry,   // another attempt follows after `backoff`
  kGiveUp,  // the call ends with this status; `reason` says why
  kHedge,   // a hedged call's copy failed and the call goes on: another
            // copy is sent after `backoff` (0: at once), or others run
};

// Returns "done", "retry", "give_up" or "hedge".
absl::string_view TraceDecisionName(TraceDecision decision);

// A correlation id a caller's request carried: its metadata key and value
// (correlation.h says which values are kept).
struct CorrelationId {
  std::string key;
  std::string value;
  bool operator==(const CorrelationId& o) const {
    return key == o.key && value == o.value;
  }
};

// One step of one call (or a breaker's change of state). A plain value; which
// fields mean something depends on `kind`, as noted. Strings are owned, so an
// event may be kept after the sink returns; the interceptor can keep one per
// call and update only the per-attempt fields.
struct TraceEvent {
  enum class Kind { kAttempt, kFailFast, kBreakerTransition, kHedge };

  Kind kind = Kind::kAttempt;
  // When the event happened (from the interceptor's Clock).
  absl::Time time = absl::UnixEpoch();
  // Identifies the call within the log; every event of a call carries it.
  // Should be random (not a counter), so that logs of many processes merged
  // together do not mix calls. 0 means none (breaker transitions may have no
  // call).
  uint64_t call_id = 0;
  // The full method name, "/pkg.Service/Method".
  std::string method;
  // kAttempt: the attempt that ended (1, 2, ...); a call's terminal event
  // counts the attempts (copies) it sent. kFailFast: the attempt that was
  // not sent (1 when the call never went out), so attempts made is
  // `attempt - 1`. kHedge: the copy just sent.
  int attempt = 0;
  // kAttempt: the attempt's status. kFailFast: the status the caller gets.
  // kHedge: none (written "-").
  grpc::StatusCode code = grpc::StatusCode::OK;
  // kAttempt: the class of the attempt's status. Not written for kFailFast
  // ("-" in logfmt, null in JSON): a call refused before an attempt was sent
  // has no answer from the server to classify.
  StatusClass status_class = StatusClass::kOk;
  // kFailFast is always kGiveUp.
  TraceDecision decision = TraceDecision::kDone;
  // For kGiveUp: why. kNone otherwise.
  GiveUpReason reason = GiveUpReason::kNone;
  // For kRetry: the wait before the next attempt; for kHedge (a decision
  // kHedge attempt line): the wait before the next copy (0: at once). For a
  // kHedge event: how long after the call's first copy this one was sent.
  // Zero otherwise.
  absl::Duration backoff = absl::ZeroDuration();
  // Time left before the call's deadline when the event happened; may be
  // negative, absl::InfiniteDuration() when the call has no deadline.
  absl::Duration deadline_left = absl::InfiniteDuration();
  // For Stats, not written to trace lines; on the injected Clock's
  // monotonic time. kAttempt: how long the attempt that ended took, from its
  // send. A call's terminal event: how long the call took, from the start of
  // its first attempt (zero when none was sent). Zero when not measured.
  absl::Duration attempt_duration = absl::ZeroDuration();
  absl::Duration call_duration = absl::ZeroDuration();
  // The circuit breaker guarding the call's destination and its state
  // ("closed", "open", "half_open"); empty when there is none.
  std::string breaker_key;
  std::string breaker_state;
  // The idempotency key sent with every attempt of the call; empty if none.
  std::string idempotency_key;
  // The caller's correlation ids (correlation.h), from the call's metadata,
  // on every event of the call; empty when it has none. `trace_id`: the
  // trace id of a valid W3C traceparent, 32 lowercase hex digits.
  // `correlation`: the other configured keys' values, in config order.
  std::string trace_id;
  std::vector<CorrelationId> correlation;
  // kBreakerTransition: the states before and after (breaker_key says which
  // breaker). Strings, so that this file does not depend on the breaker's.
  std::string from_state;
  std::string to_state;
  // A hedged call's terminal event: the copy whose answer the call returns
  // (0 when none did, and for calls that do not hedge), and the copies still
  // in flight that the call cancelled, in order. Written as `copy=2
  // cancelled=1,3`, each left out when 0 or empty.
  int copy = 0;
  std::vector<int> cancelled;
  // A stream's terminal event, once it had committed to an attempt (gRFC
  // A6; after which a failure is not retried): why it committed, written
  // as CommitReasonName says ("headers", "message", "buffer_limit",
  // "channel_buffer_limit"). None otherwise (not written).
  std::optional<CommitReason> commit;
  // The status message (kAttempt, kFailFast), or why the breaker changed
  // state (kBreakerTransition). May be empty; may hold any bytes.
  std::string message;
};

// Returns "attempt", "fail_fast", "breaker" or "hedge" (the `event` field of
// a line).
absl::string_view TraceEventKindName(TraceEvent::Kind kind);

// How much to trace. Stats see every event whatever the verbosity.
enum class TraceVerbosity {
  // Nothing.
  kOff,
  // Calls that gave up (their final attempt, or their fail-fast) and breaker
  // transitions.
  kGiveUps,
  // The default. Everything about calls that did not succeed at once: every
  // attempt of a call that retried (its final "done" or "give_up" line
  // included), calls that gave up, fail-fasts, breaker transitions. A call
  // that succeeds first time writes nothing.
  kRetries,
  // Every event, first-time successes included.
  kAll,
};

// Returns "OFF", "GIVE_UPS", "RETRIES" or "ALL" ("" for a value that is
// none of them).
absl::string_view TraceVerbosityName(TraceVerbosity verbosity);
// Parses the names above (exact, upper case). InvalidArgument otherwise.
absl::StatusOr<TraceVerbosity> ParseTraceVerbosity(absl::string_view text);

// Whether `event` is written at `verbosity`. Pure and cheap: the interceptor
// calls it before formatting anything.
//
// At kRetries a kAttempt event is written when its decision is not kDone
// (it retried or gave up), or when its attempt number is 2 or more (it is
// part of a call that retried or hedged), or when it cancelled copies.
// Together these write every attempt of a call that retried, including the
// "done" line of the attempt that succeeded, every copy a hedged call sent,
// and nothing for a call whose first attempt succeeded alone.
bool ShouldTrace(TraceVerbosity verbosity, const TraceEvent& event);

// Formats `event` as one logfmt line, with a trailing '\n'. Fields, in order:
//
//   kAttempt, kFailFast, kHedge:
//     ts level msg event call method attempt code class decision reason
//     backoff_ms deadline_left_ms breaker breaker_key key [copy]
//     [cancelled] [trace_id] [correlation] [message]
//   kBreakerTransition:
//     ts level msg event [call method] breaker_key from to [message]
//
// `ts` is RFC 3339 UTC with microseconds. `level` is "warn" for give-ups,
// fail-fasts and transitions to "open", "info" otherwise. `msg` is always
// "rpcguard". `call` is lowercase hex. `class` is lowercase ("retriable"),
// empty for fail_fast and hedge events, as is `code` for hedge events.
// `cancelled` is a comma-separated list ("1,3"), a string in JSON.
// `correlation` is the caller's ids other than the trace id, as
// comma-separated key:value pairs ("x-request-id:r-7,x-b3-spanid:a1").
// Durations are milliseconds with up to 3 decimals ("12.3", "0", "-1.5");
// deadline_left_ms is "inf" without a deadline. An empty string field is
// written as "-"; the optional fields in brackets are left out when empty.
// A value containing a space, '"', '=', '\', a control character, or that is
// exactly "-", or is not valid UTF-8, is double-quoted with \" \\ \n \r \t,
// \u00XX and, for each byte that is not valid UTF-8, \ufffd escapes.
std::string FormatLogfmt(const TraceEvent& event);

// Formats `event` as one JSON object on one line, with a trailing '\n'. The
// same keys and order as FormatLogfmt; numbers (attempt, backoff_ms,
// deadline_left_ms) are JSON numbers; an empty string field, and an infinite
// deadline_left_ms, are null. Strings are escaped per RFC 8259; bytes that
// are not valid UTF-8 become U+FFFD, so the line is always valid JSON.
std::string FormatJson(const TraceEvent& event);

// Formats a call id as written in traces: lowercase hex, no leading zeros.
std::string FormatCallId(uint64_t call_id);

// Receives trace events. Implementations must be thread-safe: Write is called
// concurrently from gRPC's threads, on the call path, so it should be quick
// and must not call back into rpcguard or block on the calls it traces.
class TraceSink {
 public:
  virtual ~TraceSink() = default;

  // Records one event. Errors (a full disk) are swallowed: tracing never
  // fails a call.
  virtual void Write(const TraceEvent& event) = 0;
};

// Writes FormatLogfmt lines to a stdio stream, stderr by default.
//
// Thread-safe. Each line is formatted with no lock held, then written with a
// single fwrite and flushed while holding only the FILE's own lock (stdio's
// flockfile), so lines of concurrent calls never interleave and each line
// has left stdio's buffer when Write returns.
class LogfmtSink final : public TraceSink {
 public:
  // Writes to stderr.
  LogfmtSink() : LogfmtSink(stderr) {}

  // Writes to `file` (non-null), which must stay open while the sink lives; the
  // sink does not close it.
  explicit LogfmtSink(FILE* file) : file_(file) {}

  void Write(const TraceEvent& event) override;

 private:
  FILE* const file_;
};

// Writes FormatJson lines to a std::ostream or to a file it opens.
//
// Thread-safe. Each line is formatted with no lock held; the sink's own mutex
// is held for one write and flush of the prebuilt line.
class JsonLinesSink final : public TraceSink {
 public:
  // Writes to `out`, which must outlive the sink. Nothing else may write to
  // `out` while the sink is in use, or lines may interleave.
  explicit JsonLinesSink(std::ostream& out) : out_(&out) {}

  // Opens `path` for appending (creating it if needed) and writes there.
  // Errors: InvalidArgument when the file cannot be opened.
  static absl::StatusOr<std::unique_ptr<JsonLinesSink>> Open(
      const std::string& path);

  ~JsonLinesSink() override;

  void Write(const TraceEvent& event) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit JsonLinesSink(std::unique_ptr<std::ostream> owned);

  absl::Mutex mu_;
  // Owned when the sink opened the file itself.
  std::unique_ptr<std::ostream> owned_;
  std::ostream* const out_ ABSL_PT_GUARDED_BY(mu_);
};

// Hands every event to a function, e.g. to forward it into the application's
// own logger. Thread-safe if the function is: it is called concurrently, on
// gRPC's threads, with no lock held.
class CallbackSink final : public TraceSink {
 public:
  // `callback` must be non-empty and thread-safe.
  explicit CallbackSink(std::function<void(const TraceEvent&)> callback)
      : callback_(std::move(callback)) {}

  void Write(const TraceEvent& event) override { callback_(event); }

 private:
  const std::function<void(const TraceEvent&)> callback_;
};

// Everything a give-up hook learns about a call that gave up.
struct GiveUpInfo {
  // The call id of its trace lines (FormatCallId), to find them in the log.
  uint64_t call_id = 0;
  // "/pkg.Service/Method".
  std::string method;
  // The final status the caller gets (the message without rpcguard's
  // "[rpcguard: ...]" annotation).
  grpc::StatusCode code = grpc::StatusCode::OK;
  std::string message;
  GiveUpReason reason = GiveUpReason::kNone;
  // Attempts sent (0 when the call failed before its first).
  int attempts = 0;
  // The idempotency key every attempt carried: replaying the request with it
  // later lets the server deduplicate.
  std::string idempotency_key;
  // The request message, serialized as it was sent.
  std::string request;
  // The caller's correlation ids, as on the call's trace lines
  // (TraceEvent::trace_id and correlation): to tie a dead letter to the
  // request that caused it.
  std::string trace_id;
  std::vector<CorrelationId> correlation;
};

// Called once for every call that gave up (a terminal event with decision
// kGiveUp, fail-fasts included), e.g. to put the request on a dead-letter
// queue or to raise an alert. It runs on the gRPC callback thread that ended
// the call, with no rpcguard lock held, and calls of different calls run
// concurrently: it must be thread-safe and cheap (copy what it needs and hand
// it off to a queue or thread of its own; never block or make a blocking RPC).
using GiveUpHook = std::function<void(const GiveUpInfo&)>;

}  // namespace rpcguard

#endif  // RPCGUARD_OBSERVABILITY_TRACE_H_
