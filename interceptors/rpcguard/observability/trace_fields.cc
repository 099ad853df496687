// Copyright rpcguard authors.
//
// The readers below are written for hostile input (the trace reader is
// fuzzed): they check every value they are given and never assume that a
// field the writers always write is present or well formed.

#include "rpcguard/observability/trace_fields.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "rpcguard/observability/correlation.h"

namespace rpcguard {
namespace internal {
namespace {

using Kind = TraceEvent::Kind;

constexpr uint8_t kBreakerEvents = TraceKindBit(Kind::kBreakerTransition);
// The events of one call: an attempt's end, a refusal, a copy sent.
constexpr uint8_t kCallEvents = TraceKindBit(Kind::kAttempt) |
                                TraceKindBit(Kind::kFailFast) |
                                TraceKindBit(Kind::kHedge);
constexpr uint8_t kAllEvents = kBreakerEvents | kCallEvents;

constexpr char kTimeFormat[] = "%Y-%m-%dT%H:%M:%E6SZ";
constexpr absl::string_view kMarker = "rpcguard";

// ---------------------------------------------------------------------------
// Vocabulary shared by formatting and parsing.

// Lowercase, as people write it ("retriable"); StatusClassName is for code.
absl::string_view ClassText(StatusClass c) {
  switch (c) {
    case StatusClass::kOk:
      return "ok";
    case StatusClass::kRetriable:
      return "retriable";
    case StatusClass::kFatal:
      return "fatal";
    case StatusClass::kAuth:
      return "auth";
  }
  return "ok";
}

absl::string_view Level(const TraceEvent& e) {
  switch (e.kind) {
    case Kind::kAttempt:
      return e.decision == TraceDecision::kGiveUp ? "warn" : "info";
    case Kind::kFailFast:
      return "warn";
    case Kind::kBreakerTransition:
      return e.to_state == "open" ? "warn" : "info";
    case Kind::kHedge:
      return "info";
  }
  return "info";
}

// Milliseconds with microsecond precision, computed on integers so that the
// text is exact and parses back to the same Duration: "12.3", "0", "-1.5".
std::string FormatMs(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "inf";
  if (d == -absl::InfiniteDuration()) return "-inf";
  const int64_t us = absl::ToInt64Microseconds(d);
  const bool negative = us < 0;
  // Unsigned, so that the most negative value does not overflow.
  const uint64_t abs_us =
      negative ? 0 - static_cast<uint64_t>(us) : static_cast<uint64_t>(us);
  std::string out = absl::StrCat(negative ? "-" : "", abs_us / 1000);
  uint64_t frac = abs_us % 1000;
  if (frac != 0) {
    int digits = 3;
    while (frac % 10 == 0) {
      frac /= 10;
      --digits;
    }
    absl::StrAppend(&out, ".", absl::StrFormat("%0*d", digits, frac));
  }
  return out;
}

absl::Status Missing(absl::string_view key) {
  return absl::InvalidArgumentError(absl::StrCat("missing field ", key));
}

// The value is cut at 40 bytes: a hostile line may hold megabytes.
absl::Status Bad(absl::string_view key, absl::string_view value) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad ", key, "=", absl::CEscape(value.substr(0, 40)),
                   value.size() > 40 ? "..." : ""));
}

// ---------------------------------------------------------------------------
// Formatting, one function per field.

bool Text(absl::string_view text, TraceFieldValue* out) {
  out->text = text;
  return true;
}

bool Stored(std::string text, bool number, TraceFieldValue* out) {
  out->storage = std::move(text);
  out->text = out->storage;
  out->number = number;
  return true;
}

bool FormatTs(const TraceEvent& e, TraceFieldValue* out) {
  return Stored(absl::FormatTime(kTimeFormat, e.time, absl::UTCTimeZone()),
                false, out);
}
bool FormatLevel(const TraceEvent& e, TraceFieldValue* out) {
  return Text(Level(e), out);
}
bool FormatMsg(const TraceEvent&, TraceFieldValue* out) {
  return Text(kMarker, out);
}
bool FormatEvent(const TraceEvent& e, TraceFieldValue* out) {
  return Text(TraceEventKindName(e.kind), out);
}
bool FormatCall(const TraceEvent& e, TraceFieldValue* out) {
  return Stored(FormatCallId(e.call_id), false, out);
}
// A breaker may change state outside any call.
bool FormatCallIfAny(const TraceEvent& e, TraceFieldValue* out) {
  return e.call_id != 0 && FormatCall(e, out);
}
bool FormatMethod(const TraceEvent& e, TraceFieldValue* out) {
  return Text(e.method, out);
}
bool FormatMethodIfAny(const TraceEvent& e, TraceFieldValue* out) {
  return !e.method.empty() && Text(e.method, out);
}
bool FormatBreakerKey(const TraceEvent& e, TraceFieldValue* out) {
  return Text(e.breaker_key, out);
}
bool FormatFrom(const TraceEvent& e, TraceFieldValue* out) {
  return Text(e.from_state, out);
}
bool FormatTo(const TraceEvent& e, TraceFieldValue* out) {
  return Text(e.to_state, out);
}
bool FormatAttempt(const TraceEvent& e, TraceFieldValue* out) {
  return Stored(absl::StrCat(e.attempt), true, out);
}
// A copy just sent has no status yet.
bool FormatCode(const TraceEvent& e, TraceFieldValue* out) {
  return Text(
      e.kind == Kind::kHedge ? absl::string_view() : StatusCodeName(e.code),
      out);
}
// A call refused before an attempt was sent, and a copy just sent, have no
// answer to classify.
bool FormatClass(const TraceEvent& e, TraceFieldValue* out) {
  return Text(e.kind == Kind::kFailFast || e.kind == Kind::kHedge
                  ? absl::string_view()
                  : ClassText(e.status_class),
              out);
}
bool FormatDecision(const TraceEvent& e, TraceFieldValue* out) {
  return Text(TraceDecisionName(e.decision), out);
}
bool FormatReason(const TraceEvent& e, TraceFieldValue* out) {
  return Text(e.reason == GiveUpReason::kNone ? absl::string_view()
                                              : GiveUpReasonName(e.reason),
              out);
}
bool FormatBackoff(const TraceEvent& e, TraceFieldValue* out) {
  return Stored(FormatMs(e.backoff), true, out);
}
bool FormatDeadlineLeft(const TraceEvent& e, TraceFieldValue* out) {
  return Stored(FormatMs(e.deadline_left), true, out);
}
bool FormatBreakerState(const TraceEvent& e, TraceFieldValue* out) {
  return Text(e.breaker_state, out);
}
bool FormatKey(const TraceEvent& e, TraceFieldValue* out) {
  return Text(e.idempotency_key, out);
}
bool FormatCopy(const TraceEvent& e, TraceFieldValue* out) {
  return e.copy > 0 && Stored(absl::StrCat(e.copy), true, out);
}
bool FormatCancelled(const TraceEvent& e, TraceFieldValue* out) {
  return !e.cancelled.empty() &&
         Stored(absl::StrJoin(e.cancelled, ","), false, out);
}
bool FormatCommit(const TraceEvent& e, TraceFieldValue* out) {
  return e.commit.has_value() && Text(CommitReasonName(*e.commit), out);
}
bool FormatTraceId(const TraceEvent& e, TraceFieldValue* out) {
  return !e.trace_id.empty() && Text(e.trace_id, out);
}
// "key:value,key:value": keys have no ':' and values no ',' (correlation.h).
bool FormatCorrelation(const TraceEvent& e, TraceFieldValue* out) {
  if (e.correlation.empty()) return false;
  std::string text;
  for (const CorrelationId& id : e.correlation) {
    absl::StrAppend(&text, text.empty() ? "" : ",", id.key, ":", id.value);
  }
  return Stored(std::move(text), false, out);
}
bool FormatMessage(const TraceEvent& e, TraceFieldValue* out) {
  return !e.message.empty() && Text(e.message, out);
}

// ---------------------------------------------------------------------------
// Parsing, one function per field. A required field's `f` is never null.

// A string field: "no value" leaves the event's default (empty).
absl::Status ReadString(const TraceFieldText* f, std::string* out) {
  if (f != nullptr && !f->absent) *out = f->value;
  return absl::OkStatus();
}

absl::Status ParseMsg(const TraceFieldText* f, TraceEvent*) {
  if (f == nullptr || f->value != kMarker) {
    return absl::NotFoundError("not an rpcguard event");
  }
  return absl::OkStatus();
}
absl::Status ParseEvent(const TraceFieldText* f, TraceEvent* e) {
  for (Kind k : {Kind::kAttempt, Kind::kFailFast, Kind::kBreakerTransition,
                 Kind::kHedge}) {
    if (f->value == TraceEventKindName(k)) {
      e->kind = k;
      return absl::OkStatus();
    }
  }
  return Bad("event", f->value);
}
absl::Status ParseTs(const TraceFieldText* f, TraceEvent* e) {
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, f->value, &e->time, &err)) {
    return Bad("ts", f->value);
  }
  return absl::OkStatus();
}
// A call id; "no value" is only accepted where the id is optional.
absl::Status ParseCall(const TraceFieldText* f, TraceEvent* e) {
  std::optional<uint64_t> id = ParseTraceCallId(f->value);
  if (!id) return Bad("call", f->value);
  e->call_id = *id;
  return absl::OkStatus();
}
absl::Status ParseCallIfAny(const TraceFieldText* f, TraceEvent* e) {
  if (f == nullptr || f->absent) return absl::OkStatus();
  return ParseCall(f, e);
}
absl::Status ParseMethod(const TraceFieldText* f, TraceEvent* e) {
  return ReadString(f, &e->method);
}
absl::Status ParseBreakerKey(const TraceFieldText* f, TraceEvent* e) {
  return ReadString(f, &e->breaker_key);
}
absl::Status ParseFrom(const TraceFieldText* f, TraceEvent* e) {
  return ReadString(f, &e->from_state);
}
absl::Status ParseTo(const TraceFieldText* f, TraceEvent* e) {
  return ReadString(f, &e->to_state);
}
absl::Status ParseAttempt(const TraceFieldText* f, TraceEvent* e) {
  int n;
  if (!absl::SimpleAtoi(f->value, &n) || n < 0) return Bad("attempt", f->value);
  e->attempt = n;
  return absl::OkStatus();
}
absl::Status ParseCode(const TraceFieldText* f, TraceEvent* e) {
  if (e->kind == Kind::kHedge && f->absent) return absl::OkStatus();
  absl::StatusOr<grpc::StatusCode> code = ParseStatusCode(f->value);
  if (!code.ok()) return Bad("code", f->value);
  e->code = *code;
  return absl::OkStatus();
}
absl::Status ParseClass(const TraceFieldText* f, TraceEvent* e) {
  const bool may_be_empty =
      e->kind == Kind::kFailFast || e->kind == Kind::kHedge;
  const std::string v = absl::AsciiStrToLower(f->value);
  if (may_be_empty && (v.empty() || v == "-")) {
    e->status_class = StatusClass::kFatal;  // the class a refused call ends in
    return absl::OkStatus();
  }
  for (StatusClass c : {StatusClass::kOk, StatusClass::kRetriable,
                        StatusClass::kFatal, StatusClass::kAuth}) {
    if (v == ClassText(c)) {
      e->status_class = c;
      return absl::OkStatus();
    }
  }
  return Bad("class", f->value);
}
absl::Status ParseDecision(const TraceFieldText* f, TraceEvent* e) {
  for (TraceDecision d : {TraceDecision::kDone, TraceDecision::kRetry,
                          TraceDecision::kGiveUp, TraceDecision::kHedge}) {
    if (f->value == TraceDecisionName(d)) {
      e->decision = d;
      return absl::OkStatus();
    }
  }
  return Bad("decision", f->value);
}
absl::Status ParseReason(const TraceFieldText* f, TraceEvent* e) {
  if (f->absent) return absl::OkStatus();
  for (int i = 0; i < kNumGiveUpReasons; ++i) {
    const auto r = static_cast<GiveUpReason>(i);
    if (f->value == GiveUpReasonName(r)) {
      e->reason = r;
      return absl::OkStatus();
    }
  }
  return Bad("reason", f->value);
}
// Milliseconds ("12.3", "inf"; null is infinite) into a Duration, rounded
// to the microsecond the writer wrote.
absl::Status ReadMillis(const TraceFieldText* f, absl::Duration* out) {
  const std::string& v = f->value;
  if (f->absent || v == "inf") {
    *out = absl::InfiniteDuration();
    return absl::OkStatus();
  }
  if (v == "-inf") {
    *out = -absl::InfiniteDuration();
    return absl::OkStatus();
  }
  double ms;
  // SimpleAtod takes "nan" and "infinity" too; the writers never do.
  if (!absl::SimpleAtod(v, &ms) || !std::isfinite(ms) || std::fabs(ms) > 9e12 ||
      v.find_first_of("nNiI") != std::string::npos) {
    return Bad(f->key, v);
  }
  *out = absl::Microseconds(std::llround(ms * 1000));
  return absl::OkStatus();
}
absl::Status ParseBackoff(const TraceFieldText* f, TraceEvent* e) {
  return ReadMillis(f, &e->backoff);
}
absl::Status ParseDeadlineLeft(const TraceFieldText* f, TraceEvent* e) {
  return ReadMillis(f, &e->deadline_left);
}
absl::Status ParseBreakerState(const TraceFieldText* f, TraceEvent* e) {
  return ReadString(f, &e->breaker_state);
}
absl::Status ParseKey(const TraceFieldText* f, TraceEvent* e) {
  return ReadString(f, &e->idempotency_key);
}
// A hedged call's terminal `copy` (optional, 1 or more).
absl::Status ParseCopy(const TraceFieldText* f, TraceEvent* e) {
  if (f == nullptr || f->absent) return absl::OkStatus();
  if (!absl::SimpleAtoi(f->value, &e->copy) || e->copy < 1) {
    return Bad("copy", f->value);
  }
  return absl::OkStatus();
}
// `cancelled`: copy numbers, comma-separated (optional).
absl::Status ParseCancelled(const TraceFieldText* f, TraceEvent* e) {
  if (f == nullptr || f->absent) return absl::OkStatus();
  for (absl::string_view part : absl::StrSplit(f->value, ',')) {
    int n;
    // Bounded: a copy number is small, and a line may be hostile.
    if (!absl::SimpleAtoi(part, &n) || n < 1 || e->cancelled.size() >= 64) {
      e->cancelled.clear();
      return Bad("cancelled", f->value);
    }
    e->cancelled.push_back(n);
  }
  return absl::OkStatus();
}
// A stream's `commit` (optional): one of the engine's reasons.
absl::Status ParseCommit(const TraceFieldText* f, TraceEvent* e) {
  if (f == nullptr || f->absent) return absl::OkStatus();
  e->commit = CommitReasonFromName(f->value);
  if (!e->commit.has_value()) return Bad("commit", f->value);
  return absl::OkStatus();
}
// 32 hex digits, as a valid traceparent's trace id (any case: people edit
// logs).
absl::Status ParseTraceId(const TraceFieldText* f, TraceEvent* e) {
  if (f == nullptr || f->absent) return absl::OkStatus();
  const std::string id = absl::AsciiStrToLower(f->value);
  if (id.size() != 32 ||
      id.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Bad("trace_id", f->value);
  }
  e->trace_id = id;
  return absl::OkStatus();
}
// key:value pairs, comma-separated, as many as a config may name.
absl::Status ParseCorrelation(const TraceFieldText* f, TraceEvent* e) {
  if (f == nullptr || f->absent) return absl::OkStatus();
  for (absl::string_view part : absl::StrSplit(f->value, ',')) {
    const size_t colon = part.find(':');
    if (colon == absl::string_view::npos || colon == 0 ||
        colon > kMaxCorrelationKeyLength ||
        !IsCorrelationValue(part.substr(colon + 1)) ||
        e->correlation.size() >= kMaxCorrelationKeys) {
      e->correlation.clear();
      return Bad("correlation", f->value);
    }
    e->correlation.push_back({std::string(part.substr(0, colon)),
                              std::string(part.substr(colon + 1))});
  }
  return absl::OkStatus();
}
absl::Status ParseMessage(const TraceFieldText* f, TraceEvent* e) {
  return ReadString(f, &e->message);
}

// The schema. A breaker transition's fields and a call's come after `event`
// in two groups of rows; each line carries one group.
constexpr TraceField kFields[] = {
    {"ts", kAllEvents, true, FormatTs, ParseTs},
    {"level", kAllEvents, false, FormatLevel, nullptr},
    {"msg", kAllEvents, false, FormatMsg, ParseMsg},
    {"event", kAllEvents, true, FormatEvent, ParseEvent},
    // A breaker's change of state.
    {"call", kBreakerEvents, false, FormatCallIfAny, ParseCallIfAny},
    {"method", kBreakerEvents, false, FormatMethodIfAny, ParseMethod},
    {"breaker_key", kBreakerEvents, true, FormatBreakerKey, ParseBreakerKey},
    {"from", kBreakerEvents, true, FormatFrom, ParseFrom},
    {"to", kBreakerEvents, true, FormatTo, ParseTo},
    // A step of a call.
    {"call", kCallEvents, true, FormatCall, ParseCall},
    {"method", kCallEvents, true, FormatMethod, ParseMethod},
    {"attempt", kCallEvents, true, FormatAttempt, ParseAttempt},
    {"code", kCallEvents, true, FormatCode, ParseCode},
    {"class", kCallEvents, true, FormatClass, ParseClass},
    {"decision", kCallEvents, true, FormatDecision, ParseDecision},
    {"reason", kCallEvents, true, FormatReason, ParseReason},
    {"backoff_ms", kCallEvents, true, FormatBackoff, ParseBackoff},
    {"deadline_left_ms", kCallEvents, true, FormatDeadlineLeft,
     ParseDeadlineLeft},
    {"breaker", kCallEvents, true, FormatBreakerState, ParseBreakerState},
    {"breaker_key", kCallEvents, true, FormatBreakerKey, ParseBreakerKey},
    {"key", kCallEvents, true, FormatKey, ParseKey},
    {"copy", kCallEvents, false, FormatCopy, ParseCopy},
    {"cancelled", kCallEvents, false, FormatCancelled, ParseCancelled},
    {"commit", kCallEvents, false, FormatCommit, ParseCommit},
    // The caller's correlation ids (correlation.h).
    {"trace_id", kCallEvents, false, FormatTraceId, ParseTraceId},
    {"correlation", kCallEvents, false, FormatCorrelation, ParseCorrelation},
    // The status message, or why the breaker changed state.
    {"message", kAllEvents, false, FormatMessage, ParseMessage},
};

// The rows read before the others: whether the line is an event at all, and
// which kind, since the kind says which rows apply.
bool IsIdentity(const TraceField& row) {
  return row.parse == ParseMsg || row.parse == ParseEvent;
}

// The value of `key` (the last one, if repeated), or null if missing.
const TraceFieldText* Find(const std::vector<TraceFieldText>& fields,
                           absl::string_view key) {
  for (auto it = fields.rbegin(); it != fields.rend(); ++it) {
    if (it->key == key) return &*it;
  }
  return nullptr;
}

absl::Status ReadRow(const TraceField& row,
                     const std::vector<TraceFieldText>& fields, TraceEvent* e) {
  const TraceFieldText* f = Find(fields, row.key);
  if (f == nullptr && row.required) return Missing(row.key);
  return row.parse(f, e);
}

}  // namespace

absl::Span<const TraceField> TraceFields() { return kFields; }

absl::StatusOr<TraceEvent> EventFromTraceFields(
    const std::vector<TraceFieldText>& fields) {
  TraceEvent e;
  for (const TraceField& row : kFields) {
    if (!IsIdentity(row)) continue;
    absl::Status st = ReadRow(row, fields, &e);
    if (!st.ok()) return st;
  }
  const uint8_t kind = TraceKindBit(e.kind);
  // Every field is read, the first error kept: the same line is reported
  // the same way whichever of its fields are broken.
  absl::Status st;
  for (const TraceField& row : kFields) {
    if ((row.kinds & kind) == 0 || row.parse == nullptr || IsIdentity(row)) {
      continue;
    }
    st.Update(ReadRow(row, fields, &e));
  }
  if (!st.ok()) return st;
  return e;
}

std::optional<uint64_t> ParseTraceCallId(absl::string_view text) {
  if (text.empty() || text.size() > 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    int h;
    if (c >= '0' && c <= '9') {
      h = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      h = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      h = c - 'A' + 10;
    } else {
      return std::nullopt;
    }
    v = v * 16 + static_cast<uint64_t>(h);
  }
  return v;
}

}  // namespace internal
}  // namespace rpcguard
