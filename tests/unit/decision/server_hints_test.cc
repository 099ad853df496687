// Copyright rpcguard authors.

#include "rpcguard/decision/server_hints.h"

#include <gtest/gtest.h>

#include <string>

#include "proto/rpcguard/internal/v1/rpc_status.pb.h"

namespace rpcguard {
namespace {

std::string Details(const std::string& type_url, int64_t seconds, int nanos) {
  rpcguard::internal::v1::RetryInfo info;
  info.mutable_retry_delay()->set_seconds(seconds);
  info.mutable_retry_delay()->set_nanos(nanos);
  rpcguard::internal::v1::RpcStatus status;
  status.set_code(14);
  google::protobuf::Any* other = status.add_details();
  other->set_type_url("type.googleapis.com/google.rpc.DebugInfo");
  other->set_value("not a RetryInfo");
  google::protobuf::Any* any = status.add_details();
  any->set_type_url(type_url);
  any->set_value(info.SerializeAsString());
  return status.SerializeAsString();
}

constexpr char kRetryInfo[] = "type.googleapis.com/google.rpc.RetryInfo";

TEST(ParseRetryInfoTest, ReadsTheDelayAmongOtherDetails) {
  EXPECT_EQ(ParseRetryInfo(Details(kRetryInfo, 1, 500000000)),
            absl::Milliseconds(1500));
  EXPECT_EQ(ParseRetryInfo(Details(kRetryInfo, 0, 0)), absl::ZeroDuration());
}

TEST(ParseRetryInfoTest, NoHintWhenAbsentOrMalformed) {
  EXPECT_EQ(ParseRetryInfo(""), std::nullopt);
  EXPECT_EQ(
      ParseRetryInfo(Details("type.googleapis.com/google.rpc.Other", 1, 0)),
      std::nullopt);
  EXPECT_EQ(ParseRetryInfo(Details(kRetryInfo, -1, 0)), std::nullopt);
  EXPECT_EQ(ParseRetryInfo(Details(kRetryInfo, 0, -5)), std::nullopt);
  EXPECT_EQ(ParseRetryInfo(Details(kRetryInfo, 0, 1000000000)), std::nullopt);
  EXPECT_EQ(ParseRetryInfo(std::string("\xff\xff\xff\xff\x0f", 5)),
            std::nullopt);
  // Every truncation of a valid message: never a crash.
  const std::string valid = Details(kRetryInfo, 2, 0);
  for (size_t n = 0; n < valid.size(); ++n) {
    ParseRetryInfo(valid.substr(0, n));
  }
}

TEST(RetryInfoStatusDetailsTest, ParsesBackToItsDelayCodeAndMessage) {
  const std::string details =
      RetryInfoStatusDetails(14, "busy", absl::Milliseconds(1250));
  EXPECT_EQ(ParseRetryInfo(details), absl::Milliseconds(1250));
  rpcguard::internal::v1::RpcStatus status;
  ASSERT_TRUE(status.ParseFromString(details));
  EXPECT_EQ(status.code(), 14);
  EXPECT_EQ(status.message(), "busy");
  // A negative delay is sent as zero, never as a malformed Duration.
  EXPECT_EQ(ParseRetryInfo(RetryInfoStatusDetails(14, "", absl::Seconds(-3))),
            absl::ZeroDuration());
}

TEST(ParsePushbackTest, A6Rules) {
  EXPECT_EQ(ParsePushback("250").kind, Pushback::Kind::kRetryAfter);
  EXPECT_EQ(ParsePushback("250").delay, absl::Milliseconds(250));
  EXPECT_EQ(ParsePushback("0").delay, absl::ZeroDuration());
  for (const char* stop :
       {"-1", "", "abc", "+5", " 5", "5 ", "1.5", "99999999999999999999"}) {
    EXPECT_EQ(ParsePushback(stop).kind, Pushback::Kind::kStop) << stop;
  }
}

}  // namespace
}  // namespace rpcguard
