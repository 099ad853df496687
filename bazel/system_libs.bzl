"""Exposes Debian's system libraries (gRPC, Protobuf, abseil, GoogleTest,
Google Benchmark) as Bazel targets.

Link flags come from pkg-config at fetch time, so the exact list of libraries
gRPC needs (dozens of -labsl_* among them) always matches the machine.
"""

def _pkg_config(ctx, args):
    result = ctx.execute(["pkg-config"] + args)
    if result.return_code != 0:
        fail("pkg-config %s failed: %s" % (" ".join(args), result.stderr))
    return [f for f in result.stdout.strip().split(" ") if f]

def _quote(flags):
    return "[" + ", ".join(['"%s"' % f for f in flags]) + "]"

def _system_libs_impl(ctx):
    ctx.symlink("/usr/include", "include")
    grpc_libs = _pkg_config(ctx, ["--libs", "grpc++", "protobuf"])
    gpr_libs = _pkg_config(ctx, ["--libs", "gpr"])
    absl_libs = _pkg_config(ctx, [
        "--libs",
        "absl_status",
        "absl_statusor",
        "absl_strings",
        "absl_str_format",
        "absl_synchronization",
        "absl_time",
        "absl_random_random",
        "absl_flat_hash_map",
    ])
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "headers",
    hdrs = [],
    includes = [],
)

# gRPC C++ with Protobuf and everything they link against.
cc_library(
    name = "grpc",
    linkopts = {grpc_libs},
)

# gRPC's support library alone (its clocks), for code that must not pull in
# gRPC itself.
cc_library(
    name = "gpr",
    linkopts = {gpr_libs},
)

cc_library(
    name = "absl",
    linkopts = {absl_libs},
)

cc_library(
    name = "gtest",
    linkopts = ["-lgmock", "-lgtest", "-lpthread"],
)

cc_library(
    name = "gtest_main",
    linkopts = ["-lgmock_main", "-lgmock", "-lgtest", "-lpthread"],
)

# prometheus-cpp (Debian's prometheus-cpp-dev), for the optional
# //interceptors/rpcguard/prometheus only: plain -l flags, not pkg-config,
# so that a machine without it still builds everything else.
cc_library(
    name = "prometheus_cpp",
    linkopts = ["-lprometheus-cpp-pull", "-lprometheus-cpp-core", "-lpthread"],
)

cc_library(
    name = "benchmark",
    linkopts = ["-lbenchmark", "-lpthread"],
)

cc_library(
    name = "benchmark_main",
    linkopts = ["-lbenchmark_main", "-lbenchmark", "-lpthread"],
)
""".format(
        grpc_libs = _quote(grpc_libs),
        gpr_libs = _quote(gpr_libs),
        absl_libs = _quote(absl_libs),
    ))

system_libs = repository_rule(
    implementation = _system_libs_impl,
    local = True,
    doc = "Debian's gRPC, Protobuf, abseil, GoogleTest and Benchmark.",
)
