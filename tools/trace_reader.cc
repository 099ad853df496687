// Copyright rpcguard authors.
//
// The parser is written for hostile input (it gets a fuzzer): every index is
// checked against the line's length, nesting is bounded, and every loop
// consumes at least one byte per turn. It only splits lines into fields; what
// the fields mean is the schema in observability/trace_fields.h, which the
// writers use too.

#include "tools/trace_reader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "rpcguard/base/json.h"
#include "rpcguard/observability/trace_fields.h"

namespace rpcguard {
namespace {

// One key=value of a line; the schema that gives them meaning is
// observability/trace_fields.h, shared with the writers.
using Field = internal::TraceFieldText;
using Fields = std::vector<Field>;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Reads a double-quoted logfmt value starting at s[*i] == '"', with the
// escapes the writer uses (JSON's). Leaves *i after the closing quote. A
// backslash that does not start a JSON escape (the writer never makes one)
// is kept as written rather than failing the line.
absl::Status ReadQuoted(absl::string_view s, size_t* i, std::string* out) {
  size_t p = *i + 1;
  while (p < s.size()) {
    const char c = s[p];
    if (c == '"') {
      *i = p + 1;
      return absl::OkStatus();
    }
    if (c != '\\') {
      out->push_back(c);
      ++p;
      continue;
    }
    if (p + 1 >= s.size()) break;
    size_t after = p;
    std::string ignored;
    if (internal::ReadJsonEscape(s, &after, out, &ignored)) {
      p = after;
    } else {
      out->append(s.data() + p, 2);
      p += 2;
    }
  }
  return absl::InvalidArgumentError("unterminated quoted string");
}

// Splits a logfmt line into its key=value pairs. Words without '=' (a
// prefix's timestamp, a logger's file:line) are skipped.
absl::Status ParseLogfmt(absl::string_view s, Fields* fields) {
  size_t i = 0;
  while (i < s.size()) {
    if (IsSpace(s[i])) {
      ++i;
      continue;
    }
    std::string ignored;
    if (s[i] == '"') {  // a quoted word with no key
      absl::Status st = ReadQuoted(s, &i, &ignored);
      if (!st.ok()) return st;
      continue;
    }
    const size_t start = i;
    while (i < s.size() && !IsSpace(s[i]) && s[i] != '=' && s[i] != '"') ++i;
    Field f;
    f.key = std::string(s.substr(start, i - start));
    if (i >= s.size() || IsSpace(s[i])) continue;  // a bare word
    if (s[i] == '"') {                             // word"quoted": not a pair
      absl::Status st = ReadQuoted(s, &i, &ignored);
      if (!st.ok()) return st;
      continue;
    }
    ++i;  // '='
    if (i < s.size() && s[i] == '"') {
      absl::Status st = ReadQuoted(s, &i, &f.value);
      if (!st.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(st.message(), " in ", f.key.substr(0, 40)));
      }
    } else {
      const size_t v = i;
      while (i < s.size() && !IsSpace(s[i])) ++i;
      f.value = std::string(s.substr(v, i - v));
      // Only the writer's bare "-" means "no value"; a quoted "-" is text.
      f.absent = f.value.empty() || f.value == "-";
    }
    fields->push_back(std::move(f));
  }
  return absl::OkStatus();
}

// Reads the JSON object that starts at s[pos] into `fields`: strings, and
// numbers and booleans as written; null, objects and arrays as absent (no
// field of an event is one). The rest of the line is not read.
absl::Status ParseJsonObject(absl::string_view s, size_t pos, Fields* fields) {
  internal::Json object;
  size_t end;
  internal::JsonError error;
  if (!internal::ParseJsonValue(s, pos, &object, &end, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad JSON: ", error.reason, " at byte ", error.offset));
  }
  if (object.type != internal::Json::Type::kObject) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad JSON: expected an object at byte ", pos));
  }
  for (internal::JsonMember& m : object.object) {
    Field f;
    f.key = std::move(m.key);
    switch (m.value.type) {
      case internal::Json::Type::kString:
      case internal::Json::Type::kNumber:
        f.value = std::move(m.value.string);
        break;
      case internal::Json::Type::kBool:
        f.value = m.value.boolean ? "true" : "false";
        break;
      case internal::Json::Type::kNull:
      case internal::Json::Type::kArray:
      case internal::Json::Type::kObject:
        f.absent = true;
        break;
    }
    fields->push_back(std::move(f));
  }
  return absl::OkStatus();
}

// Finds `"msg"` : `"rpcguard"` (any spacing) and returns its position.
std::optional<size_t> FindJsonMarker(absl::string_view s) {
  size_t from = 0;
  while (true) {
    const size_t at = s.find("\"msg\"", from);
    if (at == absl::string_view::npos) return std::nullopt;
    size_t i = at + 5;
    while (i < s.size() && IsSpace(s[i])) ++i;
    if (i < s.size() && s[i] == ':') {
      ++i;
      while (i < s.size() && IsSpace(s[i])) ++i;
      if (absl::StartsWith(s.substr(i), "\"rpcguard\"")) return at;
    }
    from = at + 1;
  }
}

// Strips what surrounds a line read from a file: its newline.
absl::string_view TrimLine(absl::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) {
    line.remove_suffix(1);
  }
  return line;
}

// True when the logfmt pair msg=rpcguard (or msg="rpcguard") appears as a
// whole pair, not inside a longer word.
bool HasLogfmtMarker(absl::string_view s) {
  for (absl::string_view marker : {"msg=rpcguard", "msg=\"rpcguard\""}) {
    size_t from = 0;
    while (true) {
      const size_t at = s.find(marker, from);
      if (at == absl::string_view::npos) break;
      const size_t end = at + marker.size();
      if ((at == 0 || IsSpace(s[at - 1])) &&
          (end == s.size() || IsSpace(s[end]))) {
        return true;
      }
      from = at + 1;
    }
  }
  return false;
}

std::string Ms(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "inf";
  if (d == -absl::InfiniteDuration()) return "-inf";
  return absl::StrFormat("%.1f", absl::ToDoubleMilliseconds(d));
}

std::string Percent(int64_t part, int64_t whole) {
  if (whole == 0) return "-";
  return absl::StrFormat(
      "%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

// "deadline 2, max_attempts 1"
std::string Counts(const std::map<std::string, int64_t>& m) {
  return absl::StrJoin(m, ", ", [](std::string* out, const auto& kv) {
    absl::StrAppend(out, kv.first, " ", kv.second);
  });
}

// Left-aligned columns, two spaces apart.
std::string Table(const std::vector<std::vector<std::string>>& rows,
                  absl::string_view indent) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line(indent);
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    absl::StripTrailingAsciiWhitespace(&line);
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string Attempts(int n) {
  return absl::StrCat(n, n == 1 ? " attempt" : " attempts");
}

std::string Outcome(bool done, bool gave_up, GiveUpReason reason) {
  if (done) return "done";
  if (gave_up) return absl::StrCat("give_up:", GiveUpReasonName(reason));
  return "incomplete";
}

}  // namespace

std::optional<uint64_t> ParseCallId(absl::string_view text) {
  return internal::ParseTraceCallId(text);
}

absl::StatusOr<TraceEvent> ParseTraceLine(absl::string_view line) {
  line = TrimLine(line);
  absl::Status json_error;
  if (std::optional<size_t> marker = FindJsonMarker(line)) {
    // The object starts at a '{' before the marker; a prefix may hold
    // braces of its own, so try the first few.
    json_error = absl::InvalidArgumentError("bad JSON: no {");
    size_t from = 0;
    for (int tries = 0; tries < 8; ++tries) {
      const size_t brace = line.find('{', from);
      if (brace == absl::string_view::npos || brace > *marker) break;
      Fields fields;
      json_error = ParseJsonObject(line, brace, &fields);
      if (json_error.ok()) {
        absl::StatusOr<TraceEvent> e = internal::EventFromTraceFields(fields);
        // NotFound: the marker was in a nested object; keep looking.
        if (!absl::IsNotFound(e.status())) return e;
        json_error = e.status();
      }
      from = brace + 1;
    }
  }
  if (HasLogfmtMarker(line)) {
    Fields fields;
    absl::Status st = ParseLogfmt(line, &fields);
    if (!st.ok()) return st;
    return internal::EventFromTraceFields(fields);
  }
  if (!json_error.ok() && !absl::IsNotFound(json_error)) return json_error;
  return absl::NotFoundError("not an rpcguard event");
}

TraceReader::TraceReader(ReaderOptions options)
    : options_(std::move(options)) {}

void TraceReader::AddLine(absl::string_view line, absl::string_view source,
                          int64_t line_number) {
  ++lines_;
  absl::StatusOr<TraceEvent> e = ParseTraceLine(line);
  if (e.ok()) {
    AddEvent(*e);
    return;
  }
  if (absl::IsNotFound(e.status())) return;
  ++unparsable_;
  if (static_cast<int>(examples_.size()) < options_.max_examples) {
    examples_.push_back(absl::StrCat(source.empty() ? "<input>" : source, ":",
                                     line_number, ": ", e.status().message()));
  }
}

int TraceReader::MethodIndex(absl::string_view method) {
  auto it = method_index_.find(method);
  if (it != method_index_.end()) return it->second;
  const int index = static_cast<int>(method_names_.size());
  method_names_.emplace_back(method);
  method_index_.emplace(std::string(method), index);
  per_method_.emplace_back();
  per_method_.back().method = std::string(method);
  return index;
}

bool MatchesCorrelation(const TraceEvent& event, absl::string_view id) {
  if (id.empty()) return false;
  if (absl::EqualsIgnoreCase(event.trace_id, id)) return true;
  for (const CorrelationId& c : event.correlation) {
    if (c.value == id) return true;
    if (id.size() == c.key.size() + 1 + c.value.size() &&
        absl::StartsWith(id, c.key) && id[c.key.size()] == ':' &&
        absl::EndsWith(id, c.value)) {
      return true;
    }
  }
  return false;
}

void TraceReader::AddEvent(const TraceEvent& e) {
  if (options_.correlation && !MatchesCorrelation(e, *options_.correlation)) {
    ++skipped_;
    return;
  }
  ++events_;
  if (options_.call_id && e.call_id == *options_.call_id) {
    call_events_.push_back(e);
  }
  if (e.kind == TraceEvent::Kind::kBreakerTransition) {
    ++transitions_[e.breaker_key][absl::StrCat(e.from_state, "->", e.to_state)];
    return;
  }
  const int mi = MethodIndex(e.method);
  MethodSummary& m = per_method_[mi];
  CallInfo& c = calls_[e.call_id];
  if (c.method < 0) c.method = mi;
  c.first = std::min(c.first, e.time);
  c.last = std::max(c.last, e.time);
  c.deadline_left = e.deadline_left;

  if (e.kind == TraceEvent::Kind::kFailFast) {
    const std::string reason(GiveUpReasonName(e.reason));
    ++m.fail_fasts[reason];
    ++m.give_ups[reason];
    c.attempts_sent = std::max(e.attempt - 1, 0);
    c.gave_up = true;
    c.reason = e.reason;
    return;
  }
  if (e.kind == TraceEvent::Kind::kHedge) {
    // A copy sent: counted when it ends (an attempt line) or by the call's
    // terminal line (which counts every copy).
    ++m.hedges;
    c.max_attempt = std::max(c.max_attempt, e.attempt);
    return;
  }
  ++m.attempts;
  c.max_attempt = std::max(c.max_attempt, e.attempt);
  switch (e.decision) {
    case TraceDecision::kRetry:
      ++m.retries;
      m.total_backoff += e.backoff;
      c.backoff += e.backoff;
      break;
    case TraceDecision::kGiveUp:
      ++m.give_ups[std::string(GiveUpReasonName(e.reason))];
      c.gave_up = true;
      c.reason = e.reason;
      c.attempts_sent = e.attempt;
      break;
    case TraceDecision::kDone:
      c.done = true;
      c.attempts_sent = e.attempt;
      break;
    case TraceDecision::kHedge:
      // A copy of a hedged call failed; the call goes on with others.
      break;
  }
}

std::vector<MethodSummary> TraceReader::Methods() const {
  std::vector<MethodSummary> out = per_method_;
  for (const auto& [id, c] : calls_) {
    if (c.method < 0) continue;
    MethodSummary& m = out[c.method];
    const int made = c.attempts_sent >= 0 ? c.attempts_sent : c.max_attempt;
    if (made >= 2 || c.backoff > absl::ZeroDuration()) ++m.retried_calls;
    ++m.calls;
    if (c.attempts_sent < 0) {
      ++m.incomplete;
      continue;
    }
    if (c.done) ++m.done;
    if (c.gave_up && !c.done) ++m.gave_up;
    ++m.attempts_per_call[std::min(c.attempts_sent, 10)];
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.method < b.method; });
  return out;
}

std::string TraceReader::Summary() const {
  std::string out =
      absl::StrCat("rpcguard trace: ", lines_, " lines, ", events_, " events, ",
                   unparsable_, " unparsable\n");
  if (options_.correlation) {
    absl::StrAppend(&out, "correlation ", *options_.correlation, ": ", skipped_,
                    " events of other calls skipped\n");
  }
  for (const MethodSummary& m : Methods()) {
    absl::StrAppend(&out, "\n", m.method.empty() ? "(no method)" : m.method,
                    "\n");
    const auto or_dash = [](std::string s) { return s.empty() ? "-" : s; };
    std::vector<std::vector<std::string>> rows;
    rows.push_back(
        {"calls", absl::StrCat(m.calls, " (done ", m.done, ", gave up ",
                               m.gave_up, ", incomplete ", m.incomplete, ")")});
    rows.push_back(
        {"attempts",
         absl::StrCat(m.attempts, " (retries ", m.retries, ", ",
                      Percent(m.retries, m.attempts), " of attempts)")});
    rows.push_back(
        {"retried calls",
         absl::StrCat(m.retried_calls, " (", Percent(m.retried_calls, m.calls),
                      " of calls)")});
    rows.push_back(
        {"attempts/call",
         or_dash(absl::StrJoin(
             m.attempts_per_call, " ", [](std::string* o, const auto& kv) {
               absl::StrAppend(o, kv.first, kv.first == 10 ? "+" : "", ":",
                               kv.second);
             }))});
    if (m.hedges > 0) {
      rows.push_back({"hedges", absl::StrCat(m.hedges, " copies sent")});
    }
    rows.push_back({"gave up", or_dash(Counts(m.give_ups))});
    rows.push_back({"failed fast", or_dash(Counts(m.fail_fasts))});
    rows.push_back({"total backoff", absl::StrCat(Ms(m.total_backoff), " ms")});
    absl::StrAppend(&out, Table(rows, "  "));
  }

  if (!transitions_.empty()) {
    absl::StrAppend(&out, "\nbreaker transitions\n");
    std::vector<std::vector<std::string>> rows;
    for (const auto& [key, counts] : transitions_) {
      rows.push_back({key.empty() ? "(no key)" : key, Counts(counts)});
    }
    absl::StrAppend(&out, Table(rows, "  "));
  }

  // Slowest: the longest from a call's first to last event (the backoffs
  // and every attempt after the first; the first attempt's own time is not
  // in the log).
  std::vector<std::pair<uint64_t, const CallInfo*>> calls;
  for (const auto& [id, c] : calls_) {
    if (c.method >= 0) calls.emplace_back(id, &c);
  }
  const size_t n = std::min(calls.size(),
                            static_cast<size_t>(std::max(options_.slowest, 0)));
  std::partial_sort(
      calls.begin(), calls.begin() + n, calls.end(),
      [](const auto& a, const auto& b) {
        const absl::Duration sa = a.second->last - a.second->first;
        const absl::Duration sb = b.second->last - b.second->first;
        if (sa != sb) return sa > sb;
        if (a.second->backoff != b.second->backoff) {
          return a.second->backoff > b.second->backoff;
        }
        return a.first < b.first;
      });
  if (n > 0) {
    absl::StrAppend(&out, "\nslowest calls (first to last event)\n");
    std::vector<std::vector<std::string>> rows = {
        {"call", "method", "attempts", "span_ms", "backoff_ms", "outcome",
         "deadline_left_ms"}};
    for (size_t i = 0; i < n; ++i) {
      const CallInfo& c = *calls[i].second;
      const int made = c.attempts_sent >= 0 ? c.attempts_sent : c.max_attempt;
      rows.push_back({FormatCallId(calls[i].first), method_names_[c.method],
                      absl::StrCat(made), Ms(c.last - c.first), Ms(c.backoff),
                      Outcome(c.done, c.gave_up, c.reason),
                      Ms(c.deadline_left)});
    }
    absl::StrAppend(&out, Table(rows, "  "));
  }

  if (unparsable_ > 0) {
    absl::StrAppend(&out, "\nunparsable lines: ", unparsable_, "\n");
    for (const std::string& e : examples_) absl::StrAppend(&out, "  ", e, "\n");
  }
  absl::StrAppend(&out,
                  "\nnote: at the default verbosity (retries) a call whose "
                  "first attempt succeeded writes nothing,\nso it is not "
                  "counted here; use the stats for totals.\n");
  return out;
}

namespace {

// A hedged call's copies side by side, on one time axis:
//
//   copies (| = 3.1 ms)
//     copy 1  ##########################--  0.0-82.3 ms   cancelled
//     copy 2  ..........#####               30.1-45.2 ms  OK (won)
//
// Copy N>1 starts at its hedge line; copy 1 at the first hedge line's time
// less its "after copy 1". A copy ends at its own attempt line, or at the
// call's terminal line (the copy that decided it, and those it cancelled).
// Empty when the call sent no hedge.
std::string CopiesChart(const std::vector<TraceEvent>& events) {
  struct Copy {
    absl::Time start = absl::InfiniteFuture();
    absl::Time end = absl::InfiniteFuture();
    std::string how = "running at the end of the log";
  };
  std::map<int, Copy> copies;
  absl::Time first = absl::InfiniteFuture();
  for (const TraceEvent& e : events) {
    if (e.kind != TraceEvent::Kind::kHedge || e.attempt < 2) continue;
    copies[e.attempt].start = e.time;
    if (first == absl::InfiniteFuture()) first = e.time - e.backoff;
  }
  if (copies.empty() || first == absl::InfiniteFuture()) return "";
  copies[1].start = first;
  for (const TraceEvent& e : events) {
    if (e.kind != TraceEvent::Kind::kAttempt) continue;
    const bool terminal = e.decision == TraceDecision::kDone ||
                          e.decision == TraceDecision::kGiveUp;
    if (!terminal) {
      auto it = copies.find(e.attempt);
      if (it == copies.end()) continue;
      it->second.end = e.time;
      it->second.how = std::string(StatusCodeName(e.code));
      continue;
    }
    if (auto it = copies.find(e.copy); it != copies.end()) {
      it->second.end = e.time;
      it->second.how = absl::StrCat(
          StatusCodeName(e.code),
          e.code == grpc::StatusCode::OK ? " (won)" : " (ended it)");
    }
    for (int n : e.cancelled) {
      if (auto it = copies.find(n); it != copies.end()) {
        it->second.end = e.time;
        it->second.how = "cancelled";
      }
    }
  }
  absl::Time last = first;
  for (const auto& [n, c] : copies) {
    if (c.start != absl::InfiniteFuture()) last = std::max(last, c.start);
    if (c.end != absl::InfiniteFuture()) last = std::max(last, c.end);
  }
  constexpr int kWidth = 40;
  const absl::Duration span =
      std::max(last - first, absl::Microseconds(kWidth));
  const absl::Duration cell = span / kWidth;
  const auto column = [&](absl::Time t) {
    return std::clamp(static_cast<int>((t - first) / cell), 0, kWidth);
  };
  std::string out = absl::StrCat("  copies (one mark = ", Ms(cell), " ms)\n");
  std::vector<std::vector<std::string>> rows;
  for (const auto& [n, c] : copies) {
    if (c.start == absl::InfiniteFuture()) continue;  // its line is missing
    const int from = column(c.start);
    const int to = c.end == absl::InfiniteFuture() ? kWidth : column(c.end);
    std::string bar(static_cast<size_t>(kWidth), ' ');
    for (int i = 0; i < from; ++i) bar[i] = '.';
    for (int i = from; i < std::max(to, from + 1) && i < kWidth; ++i) {
      bar[i] = '#';
    }
    rows.push_back(
        {absl::StrCat("copy ", n), bar,
         absl::StrCat(Ms(c.start - first), "-",
                      c.end == absl::InfiniteFuture() ? "?" : Ms(c.end - first),
                      " ms"),
         c.how});
  }
  absl::StrAppend(&out, Table(rows, "    "));
  return out;
}

}  // namespace

std::string TraceReader::Timeline() const {
  if (!options_.call_id) return "no call asked for\n";
  const std::string id = FormatCallId(*options_.call_id);
  if (call_events_.empty()) {
    return absl::StrCat("call ", id, ": no events found\n");
  }
  std::vector<TraceEvent> events = call_events_;
  // Logs merged from several files may be out of order.
  std::stable_sort(
      events.begin(), events.end(),
      [](const TraceEvent& a, const TraceEvent& b) { return a.time < b.time; });
  const TraceEvent* first_call_event = nullptr;
  for (const TraceEvent& e : events) {
    if (e.kind != TraceEvent::Kind::kBreakerTransition) {
      first_call_event = &e;
      break;
    }
  }
  std::string out = absl::StrCat("call ", id);
  if (first_call_event != nullptr) {
    absl::StrAppend(&out, "  ", first_call_event->method, "  key=",
                    first_call_event->idempotency_key.empty()
                        ? "-"
                        : first_call_event->idempotency_key);
    if (!first_call_event->trace_id.empty()) {
      absl::StrAppend(&out, "  trace_id=", first_call_event->trace_id);
    }
    for (const CorrelationId& c : first_call_event->correlation) {
      absl::StrAppend(&out, "  ", c.key, "=", c.value);
    }
  }
  absl::StrAppend(&out, "\n  first event at ",
                  absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", events[0].time,
                                   absl::UTCTimeZone()),
                  "\n");

  std::vector<std::vector<std::string>> rows = {
      {"+ms", "event", "code", "class", "decision", "backoff_ms",
       "deadline_left_ms", "breaker", "message"}};
  absl::Duration backoff;
  std::string result = "incomplete (no final event in the log)";
  for (const TraceEvent& e : events) {
    const std::string at = Ms(e.time - events[0].time);
    if (e.kind == TraceEvent::Kind::kBreakerTransition) {
      rows.push_back(
          {at, "breaker", "", "", "", "", "",
           absl::StrCat(e.breaker_key, " ", e.from_state, "->", e.to_state),
           absl::CHexEscape(e.message)});
      continue;
    }
    if (e.kind == TraceEvent::Kind::kHedge) {
      rows.push_back({at, absl::StrCat("hedge: copy ", e.attempt, " sent"), "",
                      "", "", "", Ms(e.deadline_left),
                      e.breaker_state.empty() ? "-" : e.breaker_state,
                      absl::StrCat(Ms(e.backoff), " ms after copy 1")});
      continue;
    }
    std::string decision(TraceDecisionName(e.decision));
    if (e.reason != GiveUpReason::kNone) {
      absl::StrAppend(&decision, ":", GiveUpReasonName(e.reason));
    }
    std::string message = absl::CHexEscape(e.message);
    if (e.copy > 0 || !e.cancelled.empty()) {
      // A hedged call's end: which copy decided it, which it cancelled.
      std::string copies =
          absl::StrCat("copy ", e.copy,
                       e.code == grpc::StatusCode::OK ? " won" : " ended it");
      if (!e.cancelled.empty()) {
        absl::StrAppend(&copies, ", cancelled ",
                        absl::StrJoin(e.cancelled, ","));
      }
      message = message.empty() ? copies : absl::StrCat(copies, "; ", message);
    }
    const bool fail_fast = e.kind == TraceEvent::Kind::kFailFast;
    rows.push_back(
        {at,
         fail_fast ? absl::StrCat("fail_fast before attempt ", e.attempt)
                   : absl::StrCat("attempt ", e.attempt),
         std::string(StatusCodeName(e.code)),
         absl::AsciiStrToLower(StatusClassName(e.status_class)), decision,
         e.decision == TraceDecision::kRetry ? Ms(e.backoff) : "",
         Ms(e.deadline_left), e.breaker_state.empty() ? "-" : e.breaker_state,
         message});
    if (e.decision == TraceDecision::kRetry) backoff += e.backoff;
    const int sent = fail_fast ? std::max(e.attempt - 1, 0) : e.attempt;
    if (e.decision == TraceDecision::kDone) {
      result = absl::StrCat("done after ", Attempts(sent));
    } else if (e.decision == TraceDecision::kGiveUp) {
      result =
          absl::StrCat("gave up (", GiveUpReasonName(e.reason), ") after ",
                       Attempts(sent), ", final code ", StatusCodeName(e.code));
    }
  }
  absl::StrAppend(&out, Table(rows, "  "));
  absl::StrAppend(&out, "  result: ", result, "; ", Ms(backoff),
                  " ms of backoff; ", Ms(events.back().time - events[0].time),
                  " ms from first to last event\n");
  absl::StrAppend(&out, CopiesChart(events));
  return out;
}

}  // namespace rpcguard
