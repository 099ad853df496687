"""Compiler flags of every C++ target rpcguard builds for its users."""

# rpcguard is C++17 whatever the consuming workspace's flags say: a target's
# copts come after --cxxopt on the command line, so they win. They do not
# reach the consumer's own files, which include rpcguard's headers and need
# C++17 too (rpcguard.h says so with an #error).
RPCGUARD_COPTS = ["-std=c++17"]
