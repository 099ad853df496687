// Copyright rpcguard authors.

#include "rpcguard/observability/trace.h"

#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rpcguard/decision/call_policy.h"
#include "rpcguard/observability/trace_fields.h"

namespace rpcguard {
namespace {

// Length of the valid UTF-8 sequence at the start of `s`, or 0 if it is not
// one (stray continuation byte, overlong form, surrogate, beyond U+10FFFF,
// truncated).
size_t Utf8SequenceLength(absl::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  size_t n;
  uint32_t min;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xe0) == 0xc0) {
    n = 2, min = 0x80, cp = c & 0x1f;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3, min = 0x800, cp = c & 0x0f;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4, min = 0x10000, cp = c & 0x07;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

bool NeedsQuotes(absl::string_view v) {
  if (v.empty() || v == "-") return true;
  while (!v.empty()) {
    const unsigned char c = v[0];
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) {
      return true;
    }
    const size_t n = Utf8SequenceLength(v);
    if (n == 0) return true;  // written as \ufffd
    v.remove_prefix(n);
  }
  return false;
}

// Appends `v` between double quotes, escaped the same way in both formats:
// \" \\ \n \r \t, \b and \f in JSON, \u00XX for other control characters
// (and DEL in logfmt), and \ufffd for each byte that is not part of valid
// UTF-8, so every line is valid text whatever a status message holds.
void AppendQuoted(std::string* out, absl::string_view v, bool json) {
  out->push_back('"');
  while (!v.empty()) {
    const unsigned char c = v[0];
    if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(v);
      if (n == 0) {
        out->append("\\ufffd");
        v.remove_prefix(1);
      } else {
        out->append(v.data(), n);
        v.remove_prefix(n);
      }
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append(json ? "\\b" : "\\u0008");
        break;
      case '\f':
        out->append(json ? "\\f" : "\\u000c");
        break;
      default:
        if (c < 0x20 || (!json && c == 0x7f)) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    v.remove_prefix(1);
  }
  out->push_back('"');
}

// Writes the fields of an event in order, in one of the two syntaxes, so
// that the logfmt and JSON formats cannot drift apart.
class LineWriter {
 public:
  explicit LineWriter(bool json) : json_(json) {
    if (json_) out_.push_back('{');
  }

  // A string field; empty is written as "-" (logfmt) or null (JSON).
  void String(absl::string_view key, absl::string_view value) {
    Key(key);
    if (json_) {
      if (value.empty()) {
        out_.append("null");
      } else {
        AppendQuoted(&out_, value, /*json=*/true);
      }
    } else if (value.empty()) {
      out_.push_back('-');
    } else if (NeedsQuotes(value)) {
      AppendQuoted(&out_, value, /*json=*/false);
    } else {
      out_.append(value.data(), value.size());
    }
  }

  // A number, already formatted; "inf" is null in JSON.
  void Number(absl::string_view key, absl::string_view text) {
    Key(key);
    if (json_ && (text == "inf" || text == "-inf")) {
      out_.append("null");
    } else {
      out_.append(text.data(), text.size());
    }
  }

  std::string Finish() && {
    if (json_) out_.push_back('}');
    out_.push_back('\n');
    return std::move(out_);
  }

 private:
  void Key(absl::string_view key) {
    if (json_) {
      if (!first_) out_.push_back(',');
      absl::StrAppend(&out_, "\"", key, "\":");
    } else {
      if (!first_) out_.push_back(' ');
      absl::StrAppend(&out_, key, "=");
    }
    first_ = false;
  }

  const bool json_;
  bool first_ = true;
  std::string out_;
};

// Walks the schema (trace_fields.h): the rows of the event's kind, in order.
std::string Format(const TraceEvent& e, bool json) {
  LineWriter w(json);
  const uint8_t kind = internal::TraceKindBit(e.kind);
  for (const internal::TraceField& field : internal::TraceFields()) {
    if ((field.kinds & kind) == 0) continue;
    internal::TraceFieldValue value;
    if (!field.format(e, &value)) continue;
    if (value.number) {
      w.Number(field.key, value.text);
    } else {
      w.String(field.key, value.text);
    }
  }
  return std::move(w).Finish();
}

}  // namespace

absl::string_view TraceDecisionName(TraceDecision decision) {
  switch (decision) {
    case TraceDecision::kDone:
      return "done";
    case TraceDecision::kRetry:
      return "retry";
    case TraceDecision::kGiveUp:
      return "give_up";
    case TraceDecision::kHedge:
      return "hedge";
  }
  return "done";
}

absl::string_view TraceEventKindName(TraceEvent::Kind kind) {
  switch (kind) {
    case TraceEvent::Kind::kAttempt:
      return "attempt";
    case TraceEvent::Kind::kFailFast:
      return "fail_fast";
    case TraceEvent::Kind::kBreakerTransition:
      return "breaker";
    case TraceEvent::Kind::kHedge:
      return "hedge";
  }
  return "attempt";
}

static_assert(static_cast<int>(TraceVerbosity::kAll) + 1 ==
                  kNumTraceVerbosities,
              "decision/call_policy.h's kNumTraceVerbosities must count the "
              "TraceVerbosity values");

absl::string_view TraceVerbosityName(TraceVerbosity verbosity) {
  switch (verbosity) {
    case TraceVerbosity::kOff:
      return "OFF";
    case TraceVerbosity::kGiveUps:
      return "GIVE_UPS";
    case TraceVerbosity::kRetries:
      return "RETRIES";
    case TraceVerbosity::kAll:
      return "ALL";
  }
  return "";
}

absl::StatusOr<TraceVerbosity> ParseTraceVerbosity(absl::string_view text) {
  for (TraceVerbosity v : {TraceVerbosity::kOff, TraceVerbosity::kGiveUps,
                           TraceVerbosity::kRetries, TraceVerbosity::kAll}) {
    if (text == TraceVerbosityName(v)) return v;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown trace verbosity \"", text,
                   "\" (want OFF, GIVE_UPS, RETRIES or ALL)"));
}

bool ShouldTrace(TraceVerbosity verbosity, const TraceEvent& event) {
  switch (verbosity) {
    case TraceVerbosity::kOff:
      return false;
    case TraceVerbosity::kAll:
      return true;
    case TraceVerbosity::kGiveUps:
      return event.kind == TraceEvent::Kind::kFailFast ||
             event.kind == TraceEvent::Kind::kBreakerTransition ||
             (event.kind == TraceEvent::Kind::kAttempt &&
              event.decision == TraceDecision::kGiveUp);
    case TraceVerbosity::kRetries:
      return event.kind != TraceEvent::Kind::kAttempt ||
             event.decision != TraceDecision::kDone || event.attempt >= 2 ||
             !event.cancelled.empty();
  }
  return false;
}

std::string FormatLogfmt(const TraceEvent& event) {
  return Format(event, /*json=*/false);
}

std::string FormatJson(const TraceEvent& event) {
  return Format(event, /*json=*/true);
}

std::string FormatCallId(uint64_t call_id) {
  return absl::StrCat(absl::Hex(call_id));
}

void LogfmtSink::Write(const TraceEvent& event) {
  const std::string line = FormatLogfmt(event);
  // The FILE's own lock, so that this sink and anything else writing to the
  // same FILE (stderr) never interleave within a line.
  flockfile(file_);
  fwrite(line.data(), 1, line.size(), file_);
  fflush(file_);
  funlockfile(file_);
}

JsonLinesSink::JsonLinesSink(std::unique_ptr<std::ostream> owned)
    : owned_(std::move(owned)), out_(owned_.get()) {}

JsonLinesSink::~JsonLinesSink() = default;

absl::StatusOr<std::unique_ptr<JsonLinesSink>> JsonLinesSink::Open(
    const std::string& path) {
  auto file = std::make_unique<std::ofstream>(
      path, std::ios::out | std::ios::app | std::ios::binary);
  if (!file->is_open()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open trace file ", path));
  }
  return std::unique_ptr<JsonLinesSink>(new JsonLinesSink(std::move(file)));
}

void JsonLinesSink::Write(const TraceEvent& event) {
  const std::string line = FormatJson(event);
  absl::MutexLock lock(&mu_);
  out_->write(line.data(), static_cast<std::streamsize>(line.size()));
  out_->flush();
}

}  // namespace rpcguard
