"""rpcguard_deps(): every repository rpcguard needs, for rpcguard's own
WORKSPACE and for a workspace that uses rpcguard as a repository:

    local_repository(name = "rpcguard", path = "/path/to/rpcguard")
    load("@rpcguard//bazel:deps.bzl", "rpcguard_deps")
    rpcguard_deps()

Each repository is defined only when the WORKSPACE has not defined it
already, so a consumer's own definitions win.
"""

load(":system_libs.bzl", "system_libs")

def _standin_impl(ctx):
    # rpcguard's checkout, wherever it is: the folder of its WORKSPACE file.
    src = ctx.path(ctx.attr._rpcguard_workspace).dirname
    for part in ctx.attr.dir.split("/"):
        src = src.get_child(part)
    for child in src.readdir():
        ctx.symlink(child, child.basename)

# A folder of rpcguard's checkout as a repository of its own. A macro cannot
# learn where rpcguard is checked out (local_repository's relative paths are
# the main workspace's), a repository rule can.
_standin = repository_rule(
    implementation = _standin_impl,
    attrs = {
        "dir": attr.string(mandatory = True),
        "_rpcguard_workspace": attr.label(default = Label("//:WORKSPACE")),
    },
    local = True,
)

# Debian's Bazel rule sets (packages bazel-platforms, bazel-skylib,
# bazel-rules-proto, bazel-rules-java; ./bazelw installs them).
_DEBIAN_RULES = {
    "platforms": "/usr/share/bazel/tools/platforms",
    "bazel_skylib": "/usr/share/bazel/tools/skylib",
    "rules_proto": "/usr/share/bazel/rules/proto",
    "rules_java": "/usr/share/bazel/rules/java",
}

def rpcguard_deps():
    """Defines the repositories rpcguard needs, each unless already defined.

    - rules_cc, remote_coverage_tools: rpcguard's offline stand-ins
      (bazel/rules_cc, bazel/remote_coverage_tools) for the two that Bazel
      4.2.3 would download;
    - platforms, bazel_skylib, rules_proto, rules_java: Debian's;
    - rpcguard_system: Debian's gRPC, Protobuf, abseil, GoogleTest and
      Benchmark (bazel/system_libs.bzl), under a name of rpcguard's own.
    """
    for name in ["rules_cc", "remote_coverage_tools"]:
        if not native.existing_rule(name):
            _standin(name = name, dir = "bazel/" + name)
    for name, path in _DEBIAN_RULES.items():
        if not native.existing_rule(name):
            native.local_repository(name = name, path = path)
    if not native.existing_rule("rpcguard_system"):
        system_libs(name = "rpcguard_system")
