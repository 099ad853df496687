// Copyright rpcguard authors.
//
// On time on a busy machine: a call through rpcguard ends at its deadline
// as gRPC's own calls do. Each case runs rpcguard's calls and a control's
// (a plain channel, the same deadline, wait-for-ready where rpcguard waits
// for a connection) interleaved in one run, with the machine loaded by
// busy processes (two per core), and judges rpcguard's lateness against the
// control's, never against a fixed bound: a loaded machine is late for
// gRPC too (tests/testing/punctuality.h). //bench:punctuality prints the
// same figures.

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tests/testing/punctuality.h"
#include "tests/testing/sanitizers.h"
#include "tests/testing/stub_calls.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::KindName;
using ::rpcguard::testing::Lateness;
using ::rpcguard::testing::PunctualityCase;
using ::rpcguard::testing::PunctualityScenario;
using ::rpcguard::testing::PunctualityScenarioName;
using ::rpcguard::testing::StubKind;

// What the judgement allows beyond the control's own lateness.
constexpr absl::Duration kAllowance = absl::Milliseconds(5);

class PunctualityTest : public ::testing::TestWithParam<
                            std::tuple<PunctualityScenario, StubKind>> {};

TEST_P(PunctualityTest, EndsAtItsDeadlineAsAPlainChannelDoes) {
  const PunctualityScenario scenario = std::get<0>(GetParam());
  const StubKind kind = std::get<1>(GetParam());
  PunctualityCase c(scenario, kind);
  ASSERT_TRUE(c.status().ok()) << c.status();
  // The maxima of two samples on a loaded machine are noisy: a case fails
  // only when rpcguard is later than the control in three measurements in a
  // row. Lateness of rpcguard's own making (a hop, a queue, a timer that
  // waits) shows in every one.
  const double allowance = absl::ToDoubleMilliseconds(kAllowance);
  std::string seen;
  bool on_time = false;
  for (int measurement = 0; measurement < 3 && !on_time; ++measurement) {
    Lateness rpcguard, control;
    c.Measure(RPCGUARD_SANITIZED ? 6 : 16, /*busy_per_core=*/2, &rpcguard,
              &control);
    // The deadline ends every call.
    EXPECT_EQ(rpcguard.ok, 0);
    EXPECT_EQ(control.ok, 0);
    const std::string line = absl::StrCat(
        PunctualityScenarioName(scenario), " ", KindName(kind), ": control ",
        control.Describe(), "; rpcguard ", rpcguard.Describe());
    std::printf("%s\n", line.c_str());
    absl::StrAppend(&seen, "\n  ", line);
    on_time = rpcguard.Quantile(0.99) <= control.Quantile(0.99) + allowance &&
              rpcguard.Quantile(1.0) <= control.Quantile(1.0) + allowance;
  }
  EXPECT_TRUE(on_time) << "rpcguard's lateness at p99 or max exceeded a plain "
                          "channel's + "
                       << kAllowance << " in three measurements:" << seen;
}

INSTANTIATE_TEST_SUITE_P(
    All, PunctualityTest,
    ::testing::Combine(::testing::ValuesIn(testing::kPunctualityScenarios),
                       ::testing::Values(StubKind::kSync, StubKind::kAsync,
                                         StubKind::kCallback)),
    [](const ::testing::TestParamInfo<
        std::tuple<PunctualityScenario, StubKind>>& i) {
      return PunctualityScenarioName(std::get<0>(i.param)) +
             KindName(std::get<1>(i.param));
    });

}  // namespace
}  // namespace rpcguard
