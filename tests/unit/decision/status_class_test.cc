// Copyright rpcguard authors.
//
// Table tests of the status classifier and the status-code name helpers.

#include "rpcguard/decision/status_class.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rpcguard/decision/policy.h"

namespace rpcguard {
namespace {

using grpc::StatusCode;

constexpr int kNumCodes = 17;

StatusCode Code(int i) { return static_cast<StatusCode>(i); }

struct Row {
  StatusCode code;
  absl::string_view name;
  // Class under the default retriable set, with no flags set.
  StatusClass default_class;
};

// Every gRPC status code, in numeric order.
const std::vector<Row>& Table() {
  static const auto* const kTable = new std::vector<Row>{
      {StatusCode::OK, "OK", StatusClass::kOk},
      {StatusCode::CANCELLED, "CANCELLED", StatusClass::kFatal},
      {StatusCode::UNKNOWN, "UNKNOWN", StatusClass::kFatal},
      {StatusCode::INVALID_ARGUMENT, "INVALID_ARGUMENT", StatusClass::kFatal},
      {StatusCode::DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED", StatusClass::kFatal},
      {StatusCode::NOT_FOUND, "NOT_FOUND", StatusClass::kFatal},
      {StatusCode::ALREADY_EXISTS, "ALREADY_EXISTS", StatusClass::kFatal},
      {StatusCode::PERMISSION_DENIED, "PERMISSION_DENIED", StatusClass::kAuth},
      {StatusCode::RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED",
       StatusClass::kRetriable},
      {StatusCode::FAILED_PRECONDITION, "FAILED_PRECONDITION",
       StatusClass::kFatal},
      {StatusCode::ABORTED, "ABORTED", StatusClass::kRetriable},
      {StatusCode::OUT_OF_RANGE, "OUT_OF_RANGE", StatusClass::kFatal},
      {StatusCode::UNIMPLEMENTED, "UNIMPLEMENTED", StatusClass::kFatal},
      {StatusCode::INTERNAL, "INTERNAL", StatusClass::kFatal},
      {StatusCode::UNAVAILABLE, "UNAVAILABLE", StatusClass::kRetriable},
      {StatusCode::DATA_LOSS, "DATA_LOSS", StatusClass::kFatal},
      {StatusCode::UNAUTHENTICATED, "UNAUTHENTICATED", StatusClass::kAuth},
  };
  return *kTable;
}

AttemptOutcome Outcome(StatusCode code) {
  AttemptOutcome o;
  o.code = code;
  return o;
}

TEST(StatusClassTableTest, CoversEveryCodeInOrder) {
  ASSERT_EQ(Table().size(), kNumCodes);
  for (int i = 0; i < kNumCodes; ++i) {
    EXPECT_EQ(static_cast<int>(Table()[i].code), i);
  }
}

TEST(ClassifierTest, DefaultSetClassifiesEveryCode) {
  const Classifier classifier;
  for (const Row& row : Table()) {
    EXPECT_EQ(classifier.Classify(Outcome(row.code)), row.default_class)
        << row.name << ": got "
        << StatusClassName(classifier.Classify(Outcome(row.code)));
  }
}

TEST(ClassifierTest, DefaultConstructedUsesDefaultRetriableSet) {
  EXPECT_EQ(Classifier().retriable(), StatusCodeSet::DefaultRetriable());
  EXPECT_EQ(MethodPolicy().MakeClassifier().retriable(),
            StatusCodeSet::DefaultRetriable());
}

TEST(ClassifierTest, DefaultRetriableSetIsExactlyThreeCodes) {
  const StatusCodeSet set = StatusCodeSet::DefaultRetriable();
  for (int i = 0; i < kNumCodes; ++i) {
    const bool want = Code(i) == StatusCode::UNAVAILABLE ||
                      Code(i) == StatusCode::RESOURCE_EXHAUSTED ||
                      Code(i) == StatusCode::ABORTED;
    EXPECT_EQ(set.Contains(Code(i)), want) << StatusCodeName(Code(i));
  }
}

TEST(ClassifierTest, CancelledIsFatal) {
  EXPECT_EQ(Classifier().Classify(Outcome(StatusCode::CANCELLED)),
            StatusClass::kFatal);
}

TEST(ClassifierTest, DeadlineExceededRetriableOnlyOnPerAttemptTimeout) {
  const Classifier classifier;
  AttemptOutcome o = Outcome(StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(classifier.Classify(o), StatusClass::kFatal);
  o.per_attempt_timeout_expired = true;
  EXPECT_EQ(classifier.Classify(o), StatusClass::kRetriable);
}

TEST(ClassifierTest, PerAttemptTimeoutFlagOnlyAffectsDeadlineExceeded) {
  const Classifier classifier;
  for (const Row& row : Table()) {
    if (row.code == StatusCode::DEADLINE_EXCEEDED) continue;
    AttemptOutcome o = Outcome(row.code);
    o.per_attempt_timeout_expired = true;
    EXPECT_EQ(classifier.Classify(o), row.default_class) << row.name;
  }
}

TEST(ClassifierTest, DeadlineExceededOnPerAttemptTimeoutIgnoresTheSet) {
  // Rule 3: even with a set that leaves DEADLINE_EXCEEDED out, a per-attempt
  // timeout is retriable.
  const Classifier classifier(StatusCodeSet{StatusCode::INTERNAL});
  AttemptOutcome o = Outcome(StatusCode::DEADLINE_EXCEEDED);
  o.per_attempt_timeout_expired = true;
  EXPECT_EQ(classifier.Classify(o), StatusClass::kRetriable);
}

TEST(ClassifierTest, DeadlineExceededInTheSetStillNeedsPerAttemptTimeout) {
  const Classifier classifier(StatusCodeSet{StatusCode::DEADLINE_EXCEEDED});
  EXPECT_EQ(classifier.Classify(Outcome(StatusCode::DEADLINE_EXCEEDED)),
            StatusClass::kFatal);
}

TEST(ClassifierTest, CallersCancelIsNeverRetried) {
  const std::vector<Classifier> classifiers = {
      Classifier(), Classifier(StatusCodeSet{StatusCode::INTERNAL}),
      Classifier(
          StatusCodeSet{StatusCode::UNAUTHENTICATED, StatusCode::CANCELLED})};
  for (const Classifier& classifier : classifiers) {
    for (int i = 1; i < kNumCodes; ++i) {
      for (bool per_attempt : {false, true}) {
        AttemptOutcome o = Outcome(Code(i));
        o.caller_cancelled = true;
        o.per_attempt_timeout_expired = per_attempt;
        EXPECT_EQ(classifier.Classify(o), StatusClass::kFatal)
            << StatusCodeName(Code(i)) << " per_attempt=" << per_attempt;
      }
    }
  }
}

TEST(ClassifierTest, CallersDeadlineIsNeverRetried) {
  const Classifier classifier;
  for (int i = 1; i < kNumCodes; ++i) {
    for (bool per_attempt : {false, true}) {
      AttemptOutcome o = Outcome(Code(i));
      o.caller_deadline_expired = true;
      o.per_attempt_timeout_expired = per_attempt;
      EXPECT_EQ(classifier.Classify(o), StatusClass::kFatal)
          << StatusCodeName(Code(i)) << " per_attempt=" << per_attempt;
    }
  }
}

TEST(ClassifierTest, LocalErrorsAreNeverRetried) {
  const std::vector<Classifier> classifiers = {
      Classifier(), Classifier(StatusCodeSet{StatusCode::INTERNAL})};
  for (const Classifier& classifier : classifiers) {
    for (int i = 1; i < kNumCodes; ++i) {
      for (bool per_attempt : {false, true}) {
        AttemptOutcome o = Outcome(Code(i));
        o.local_error = true;
        o.per_attempt_timeout_expired = per_attempt;
        EXPECT_EQ(classifier.Classify(o), StatusClass::kFatal)
            << StatusCodeName(Code(i)) << " per_attempt=" << per_attempt;
      }
    }
  }
}

TEST(ClassifierTest, OkIsOkWhateverTheFlags) {
  const Classifier classifier;
  for (int flags = 0; flags < 16; ++flags) {
    AttemptOutcome o = Outcome(StatusCode::OK);
    o.caller_cancelled = flags & 1;
    o.caller_deadline_expired = flags & 2;
    o.per_attempt_timeout_expired = flags & 4;
    o.local_error = flags & 8;
    EXPECT_EQ(classifier.Classify(o), StatusClass::kOk) << flags;
  }
}

struct LocalErrorRow {
  StatusCode code;
  std::string message;
  bool local;
};

// gRPC 1.51's own words for errors the client makes itself, and near misses
// that are a server's answers.
TEST(IsLocalErrorTest, GrpcsOwnWordsOnly) {
  const std::vector<LocalErrorRow> rows = {
      {StatusCode::RESOURCE_EXHAUSTED,
       "Sent message larger than max (4106 vs. 1024)", true},
      {StatusCode::RESOURCE_EXHAUSTED,
       "Received message larger than max (4107 vs. 1024)", true},
      {StatusCode::RESOURCE_EXHAUSTED,
       "received initial metadata size exceeds limit", true},
      {StatusCode::RESOURCE_EXHAUSTED,
       "received initial metadata size exceeds limit (9000 vs. 8192). "
       "GRPC_ARG_MAX_METADATA_SIZE can be set to increase this limit.",
       true},
      // gRPC 1.51 reports every plugin failure as UNAVAILABLE; later ones
      // keep the plugin's code.
      {StatusCode::UNAVAILABLE,
       "Getting metadata from plugin failed with error: token service down",
       true},
      {StatusCode::UNAUTHENTICATED,
       "Getting metadata from plugin failed with error: expired", true},
      {StatusCode::OK, "Sent message larger than max (1 vs. 0)", false},
      {StatusCode::OK,
       "Getting metadata from plugin failed with error: ", false},
      // The size words mean a limit only with gRPC's code for it.
      {StatusCode::UNAVAILABLE, "Sent message larger than max (4106 vs. 1024)",
       false},
      {StatusCode::INTERNAL, "received initial metadata size exceeds limit",
       false},
      // A server's own words that merely mention them.
      {StatusCode::RESOURCE_EXHAUSTED,
       "quota: Received message larger than max (4107 vs. 1024)", false},
      {StatusCode::UNAVAILABLE,
       "upstream: Getting metadata from plugin failed with error: x", false},
      {StatusCode::RESOURCE_EXHAUSTED, "quota exceeded", false},
      {StatusCode::UNAVAILABLE, "failed to connect to all addresses", false},
      {StatusCode::RESOURCE_EXHAUSTED, "", false},
  };
  for (const LocalErrorRow& row : rows) {
    EXPECT_EQ(IsLocalError(row.code, row.message), row.local)
        << StatusCodeName(row.code) << " \"" << row.message << "\"";
  }
}

TEST(ClassifierTest, ReplacedSetReplacesTheDefault) {
  const Classifier classifier(StatusCodeSet{StatusCode::INTERNAL});
  EXPECT_EQ(classifier.Classify(Outcome(StatusCode::INTERNAL)),
            StatusClass::kRetriable);
  EXPECT_EQ(classifier.Classify(Outcome(StatusCode::UNAVAILABLE)),
            StatusClass::kFatal);
  EXPECT_EQ(classifier.Classify(Outcome(StatusCode::RESOURCE_EXHAUSTED)),
            StatusClass::kFatal);
  EXPECT_EQ(classifier.Classify(Outcome(StatusCode::ABORTED)),
            StatusClass::kFatal);
  // The auth codes are not part of the retriable set and stay kAuth.
  EXPECT_EQ(classifier.Classify(Outcome(StatusCode::UNAUTHENTICATED)),
            StatusClass::kAuth);
  EXPECT_EQ(classifier.Classify(Outcome(StatusCode::PERMISSION_DENIED)),
            StatusClass::kAuth);
}

TEST(ClassifierTest, ReplacedSetClassifiesEveryCode) {
  const Classifier classifier(StatusCodeSet{StatusCode::INTERNAL});
  for (const Row& row : Table()) {
    StatusClass want;
    if (row.code == StatusCode::OK) {
      want = StatusClass::kOk;
    } else if (row.code == StatusCode::INTERNAL) {
      want = StatusClass::kRetriable;
    } else if (row.code == StatusCode::UNAUTHENTICATED ||
               row.code == StatusCode::PERMISSION_DENIED) {
      want = StatusClass::kAuth;
    } else {
      want = StatusClass::kFatal;
    }
    EXPECT_EQ(classifier.Classify(Outcome(row.code)), want) << row.name;
  }
}

TEST(ClassifierTest, PolicyWithRetryableCodesMakesMatchingClassifier) {
  MethodPolicy policy;
  policy.retry.retryable_codes = StatusCodeSet{StatusCode::INTERNAL};
  const Classifier classifier = policy.MakeClassifier();
  EXPECT_EQ(classifier.Classify(Outcome(StatusCode::INTERNAL)),
            StatusClass::kRetriable);
  EXPECT_EQ(classifier.Classify(Outcome(StatusCode::UNAVAILABLE)),
            StatusClass::kFatal);
}

TEST(ClassifierTest, EmptySetRetriesNothingButPerAttemptTimeouts) {
  const Classifier classifier{StatusCodeSet()};
  for (int i = 1; i < kNumCodes; ++i) {
    EXPECT_NE(classifier.Classify(Outcome(Code(i))), StatusClass::kRetriable)
        << StatusCodeName(Code(i));
  }
  AttemptOutcome o = Outcome(StatusCode::DEADLINE_EXCEEDED);
  o.per_attempt_timeout_expired = true;
  EXPECT_EQ(classifier.Classify(o), StatusClass::kRetriable);
}

TEST(StatusCodeSetTest, AddContainsAndEquality) {
  StatusCodeSet set;
  EXPECT_TRUE(set.empty());
  set.Add(StatusCode::INTERNAL);
  EXPECT_FALSE(set.empty());
  EXPECT_TRUE(set.Contains(StatusCode::INTERNAL));
  EXPECT_FALSE(set.Contains(StatusCode::UNAVAILABLE));
  EXPECT_EQ(set, StatusCodeSet{StatusCode::INTERNAL});
  EXPECT_FALSE(set == StatusCodeSet::DefaultRetriable());
  set.Add(Code(-1));
  EXPECT_EQ(set, StatusCodeSet{StatusCode::INTERNAL});
  EXPECT_FALSE(set.Contains(Code(-1)));
}

TEST(StatusCodeNameTest, EveryCode) {
  for (const Row& row : Table()) {
    EXPECT_EQ(StatusCodeName(row.code), row.name);
  }
}

TEST(StatusCodeNameTest, OutOfRange) {
  EXPECT_EQ(StatusCodeName(Code(17)), "CODE_OUT_OF_RANGE");
  EXPECT_EQ(StatusCodeName(Code(-1)), "CODE_OUT_OF_RANGE");
  EXPECT_EQ(StatusCodeName(Code(1000)), "CODE_OUT_OF_RANGE");
}

TEST(StatusClassNameTest, EveryClass) {
  EXPECT_EQ(StatusClassName(StatusClass::kOk), "OK");
  EXPECT_EQ(StatusClassName(StatusClass::kRetriable), "RETRIABLE");
  EXPECT_EQ(StatusClassName(StatusClass::kFatal), "FATAL");
  EXPECT_EQ(StatusClassName(StatusClass::kAuth), "AUTH");
}

TEST(ParseStatusCodeTest, NamesInAnyCase) {
  for (const Row& row : Table()) {
    const std::string upper(row.name);
    const std::string lower = absl::AsciiStrToLower(row.name);
    std::string mixed = lower;
    for (size_t i = 0; i < mixed.size(); i += 2) {
      mixed[i] = absl::ascii_toupper(mixed[i]);
    }
    for (const std::string& text : {upper, lower, mixed}) {
      absl::StatusOr<StatusCode> code = ParseStatusCode(text);
      ASSERT_TRUE(code.ok()) << text << ": " << code.status();
      EXPECT_EQ(*code, row.code) << text;
    }
  }
}

TEST(ParseStatusCodeTest, Numbers) {
  for (int i = 0; i < kNumCodes; ++i) {
    absl::StatusOr<StatusCode> code = ParseStatusCode(absl::StrCat(i));
    ASSERT_TRUE(code.ok()) << i << ": " << code.status();
    EXPECT_EQ(*code, Code(i));
  }
}

TEST(ParseStatusCodeTest, NameAndNumberRoundTrip) {
  for (int i = 0; i < kNumCodes; ++i) {
    absl::StatusOr<StatusCode> code = ParseStatusCode(StatusCodeName(Code(i)));
    ASSERT_TRUE(code.ok()) << i;
    EXPECT_EQ(*code, Code(i));
  }
}

TEST(ParseStatusCodeTest, NumbersOutOfRange) {
  for (absl::string_view text : {"17", "-1", "100", "2147483647"}) {
    absl::StatusOr<StatusCode> code = ParseStatusCode(text);
    EXPECT_EQ(code.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(ParseStatusCodeTest, Garbage) {
  for (absl::string_view text :
       {"", " ", "UNAVAILABLE_", "UN AVAILABLE", "UNAVAIL", "unavailable!",
        "14x", "0x0e", "1.0", "STATUS_UNAVAILABLE", "CODE_OUT_OF_RANGE",
        "99999999999999999999"}) {
    absl::StatusOr<StatusCode> code = ParseStatusCode(text);
    EXPECT_EQ(code.status().code(), absl::StatusCode::kInvalidArgument)
        << "\"" << text << "\"";
  }
}

}  // namespace
}  // namespace rpcguard

namespace rpcguard {
namespace {

TEST(IsNotSentTest, GrpcsOwnNoConnectionWords) {
  using grpc::StatusCode;
  EXPECT_TRUE(IsNotSent(StatusCode::UNAVAILABLE,
                        "failed to connect to all addresses; last error: "
                        "UNKNOWN: ipv4:127.0.0.1:1: Connection refused"));
  EXPECT_TRUE(IsNotSent(StatusCode::UNAVAILABLE,
                        "connections to all backends failing; last error: x"));
  EXPECT_TRUE(IsNotSent(StatusCode::UNAVAILABLE, "empty address list: "));
  EXPECT_TRUE(IsNotSent(StatusCode::UNAVAILABLE,
                        "DNS resolution failed for nowhere.invalid:443"));
  // Another code, or a server's own words: not it.
  EXPECT_FALSE(IsNotSent(StatusCode::INTERNAL,
                         "failed to connect to all addresses; last error: "));
  EXPECT_FALSE(IsNotSent(StatusCode::UNAVAILABLE, "Socket closed"));
  EXPECT_FALSE(IsNotSent(StatusCode::UNAVAILABLE, "backend restarting"));
  EXPECT_FALSE(IsNotSent(StatusCode::OK, ""));
}

}  // namespace
}  // namespace rpcguard
