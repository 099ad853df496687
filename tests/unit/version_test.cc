// Copyright rpcguard authors.
//
// rpcguard's version: Version() (the library) agrees with the macros (the
// headers).

#include "rpcguard/version.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "rpcguard/rpcguard.h"

namespace rpcguard {
namespace {

TEST(VersionTest, LibraryMatchesTheMacros) {
  EXPECT_EQ(std::string(Version()),
            absl::StrCat(RPCGUARD_VERSION_MAJOR, ".", RPCGUARD_VERSION_MINOR,
                         ".", RPCGUARD_VERSION_PATCH));
  EXPECT_STREQ(Version(), RPCGUARD_VERSION_STRING);
}

TEST(VersionTest, IsMajorMinorPatch) {
  static_assert(RPCGUARD_VERSION_MAJOR >= 0 && RPCGUARD_VERSION_MINOR >= 0 &&
                    RPCGUARD_VERSION_PATCH >= 0,
                "three numbers");
  EXPECT_NE(std::string(Version()), "0.0.0");
}

}  // namespace
}  // namespace rpcguard
