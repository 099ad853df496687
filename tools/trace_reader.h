// Copyright rpcguard authors.
//
// Reading rpcguard's trace lines back: the parser of one line, and the
// summaries //tools:rpcguard_trace prints.
//
// Logs mix rpcguard's events with everything else an application writes, in
// either format LogfmtSink and JsonLinesSink write, perhaps behind a prefix a
// log collector added ("2026-11-30T05:01:02Z stderr F ts=..."). A line is an
// rpcguard event when it has the pair msg=rpcguard (logfmt) or
// "msg":"rpcguard" (JSON); any other line is not looked at. An event line
// that cannot be read (truncated, a field with a bad value) is counted and
// reported, never fatal.
//
//   rpcguard::TraceReader reader;
//   for each line: reader.AddLine(line, "app.log", line_number);
//   std::cout << reader.Summary();       // per-method summary
//   std::cout << reader.Timeline(call);  // needs ReaderOptions::call_id

#ifndef RPCGUARD_TOOLS_TRACE_READER_H_
#define RPCGUARD_TOOLS_TRACE_READER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpcguard/observability/trace.h"

namespace rpcguard {

// Parses one log line (with or without its trailing newline) into the event
// FormatLogfmt or FormatJson wrote. Errors:
//   NotFound         the line is not an rpcguard event (ignore it);
//   InvalidArgument  it is one but cannot be read; the message says why.
// Fields it does not know are ignored, so newer writers stay readable. Safe
// on any bytes: never crashes, never reads out of bounds, bounded recursion,
// time linear in the line's length.
absl::StatusOr<TraceEvent> ParseTraceLine(absl::string_view line);

// Parses a call id as written in traces (hex, 1 to 16 digits, any case).
std::optional<uint64_t> ParseCallId(absl::string_view text);

// Whether `event` carries the correlation id `id`: its trace_id (`id` in any
// case), the value of one of its correlation ids ("r-7"), or one of them as
// key:value ("x-request-id:r-7"). An empty `id` matches nothing.
bool MatchesCorrelation(const TraceEvent& event, absl::string_view id);

// What the reader is asked for.
struct ReaderOptions {
  // Keep the events of this call for Timeline().
  std::optional<uint64_t> call_id;
  // Read only the events of calls that carry this correlation id
  // (MatchesCorrelation); breaker transitions and other calls' events are
  // skipped, and counted (skipped()).
  std::optional<std::string> correlation;
  // How many calls the "slowest calls" table lists.
  int slowest = 5;
  // How many unparsable lines the summary quotes (all are counted).
  int max_examples = 5;
};

// One method's numbers, as read from a log.
struct MethodSummary {
  std::string method;
  // Calls seen (with any event), and how they ended: done, gave up, or
  // incomplete (no terminal event: the log was cut, or they were still
  // running).
  int64_t calls = 0;
  int64_t done = 0;
  int64_t gave_up = 0;
  int64_t incomplete = 0;
  int64_t attempts = 0;  // attempt events
  int64_t retries = 0;   // attempt events that decided to retry
  int64_t hedges = 0;    // hedge events: copies sent while others ran
  // Calls that made more than one attempt.
  int64_t retried_calls = 0;
  // Finished calls by attempts sent: key 10 holds 10 and more.
  std::map<int, int64_t> attempts_per_call;
  std::map<std::string, int64_t> give_ups;    // by reason name
  std::map<std::string, int64_t> fail_fasts;  // by reason name
  absl::Duration total_backoff = absl::ZeroDuration();
};

// Reads log lines and summarises the rpcguard events among them.
// Thread-compatible.
class TraceReader {
 public:
  explicit TraceReader(ReaderOptions options = {});

  // Reads one line; `source` and `line_number` only label error reports.
  void AddLine(absl::string_view line, absl::string_view source = "",
               int64_t line_number = 0);

  // Counts an event that was already parsed.
  void AddEvent(const TraceEvent& event);

  int64_t lines() const { return lines_; }
  int64_t events() const { return events_; }
  int64_t unparsable() const { return unparsable_; }
  // Events left out by ReaderOptions::correlation (not in events()).
  int64_t skipped() const { return skipped_; }
  // The first few unparsable lines: "source:line: why".
  const std::vector<std::string>& unparsable_examples() const {
    return examples_;
  }

  // Per-method numbers, sorted by method name.
  std::vector<MethodSummary> Methods() const;

  // Breaker key -> "from->to" -> count.
  const std::map<std::string, std::map<std::string, int64_t>>&
  breaker_transitions() const {
    return transitions_;
  }

  // The human-readable report: per-method summaries, breaker transitions,
  // the slowest calls and the unparsable lines.
  std::string Summary() const;

  // The attempts of ReaderOptions::call_id in order, one line each, or a
  // line saying it was not found.
  std::string Timeline() const;

  // Whether any event of ReaderOptions::call_id was read.
  bool found_call() const { return !call_events_.empty(); }

 private:
  // What is known of one call; kept small, a log may hold millions.
  struct CallInfo {
    int method = -1;  // index into method_names_
    int max_attempt = 0;
    int attempts_sent = -1;  // from the terminal event, -1 before it
    bool done = false;
    bool gave_up = false;
    absl::Time first = absl::InfiniteFuture();
    absl::Time last = absl::InfinitePast();
    absl::Duration backoff = absl::ZeroDuration();
    absl::Duration deadline_left = absl::InfiniteDuration();
    GiveUpReason reason = GiveUpReason::kNone;
  };

  int MethodIndex(absl::string_view method);

  ReaderOptions options_;
  int64_t lines_ = 0;
  int64_t events_ = 0;
  int64_t unparsable_ = 0;
  int64_t skipped_ = 0;
  std::vector<std::string> examples_;

  std::vector<std::string> method_names_;
  absl::flat_hash_map<std::string, int> method_index_;
  // Per method (by index): counters that do not need per-call state.
  std::vector<MethodSummary> per_method_;
  absl::flat_hash_map<uint64_t, CallInfo> calls_;
  std::map<std::string, std::map<std::string, int64_t>> transitions_;
  std::vector<TraceEvent> call_events_;
};

}  // namespace rpcguard

#endif  // RPCGUARD_TOOLS_TRACE_READER_H_
