// Copyright rpcguard authors.

#include "rpcguard/observability/trace.h"

#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rpcguard/base/json.h"
#include "rpcguard/base/utf8.h"
#include "rpcguard/decision/call_policy.h"
#include "rpcguard/observability/trace_fields.h"

namespace rpcguard {
namespace {

bool NeedsQuotes(absl::string_view v) {
  if (v.empty() || v == "-") return true;
  while (!v.empty()) {
    const unsigned char c = v[0];
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) {
      return true;
    }
    const size_t n = internal::Utf8SequenceLength(v);
    if (n == 0) return true;  // written as \ufffd
    v.remove_prefix(n);
  }
  return false;
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
        AppendQuotedString(&out_, value, /*json=*/true);
      }
    } else if (value.empty()) {
      out_.push_back('-');
    } else if (NeedsQuotes(value)) {
      AppendQuotedString(&out_, value, /*json=*/false);
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
