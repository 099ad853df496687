"""Who may depend on rpcguard's internal targets."""

# rpcguard itself, its tests, benchmarks and tools. Applications depend on
# //interceptors:rpcguard and //interceptors/testing only; everything under
# interceptors/rpcguard/internal/ is visible to this list alone.
RPCGUARD_INTERNAL = [
    "//interceptors:__subpackages__",
    "//tests:__subpackages__",
    "//bench:__subpackages__",
    "//tools:__subpackages__",
]
