// Copyright rpcguard authors.

#include "rpcguard/version.h"

namespace rpcguard {

const char* Version() { return RPCGUARD_VERSION_STRING; }

}  // namespace rpcguard
