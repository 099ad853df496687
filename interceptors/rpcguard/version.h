// Copyright rpcguard authors.
//
// rpcguard's version, in the one place it is written: the three numbers
// below. CMakeLists.txt reads them from this file for the CMake package
// version and rpcguard.pc; CHANGELOG.md says what each version changed.
// Versions follow Semantic Versioning; before 1.0.0 a minor version may
// change the API.

#ifndef RPCGUARD_VERSION_H_
#define RPCGUARD_VERSION_H_

#define RPCGUARD_VERSION_MAJOR 0
#define RPCGUARD_VERSION_MINOR 3
#define RPCGUARD_VERSION_PATCH 0

// "MAJOR.MINOR.PATCH", e.g. "0.3.0": the version of the headers compiled.
#define RPCGUARD_VERSION_STRING                                          \
  RPCGUARD_VERSION_JOIN_(RPCGUARD_VERSION_MAJOR, RPCGUARD_VERSION_MINOR, \
                         RPCGUARD_VERSION_PATCH)
#define RPCGUARD_VERSION_JOIN_(major, minor, patch) \
  RPCGUARD_VERSION_QUOTE_(major, minor, patch)
#define RPCGUARD_VERSION_QUOTE_(major, minor, patch) \
#major "." #minor "." #patch

namespace rpcguard {

// The version of the rpcguard library linked, "MAJOR.MINOR.PATCH". Differs
// from RPCGUARD_VERSION_STRING only when a program's headers and library
// come from different versions.
const char* Version();

}  // namespace rpcguard

#endif  // RPCGUARD_VERSION_H_
