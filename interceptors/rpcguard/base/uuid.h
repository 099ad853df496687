// Copyright rpcguard authors.

#ifndef RPCGUARD_BASE_UUID_H_
#define RPCGUARD_BASE_UUID_H_

#include <string>

#include "rpcguard/random.h"

namespace rpcguard {

// Returns a random (version 4) UUID in its 36-character text form, e.g.
// "0f8fad5b-d9cb-469f-a165-70867728950e", drawn from `random`.
std::string NewUuidV4(Random& random);

}  // namespace rpcguard

#endif  // RPCGUARD_BASE_UUID_H_
