"""cc_grpc_proto: compiles .proto files with the system protoc and
grpc_cpp_plugin (Bazel's native proto rules need @com_google_protobuf, which
cannot be fetched offline)."""

load(":copts.bzl", "RPCGUARD_COPTS")

# Where rpcguard's own files are in the execroot: "" in rpcguard's workspace,
# "external/<name>" when another workspace uses rpcguard as a repository.
_RPCGUARD_ROOT = Label("//proto:include_root").workspace_root

def _path(root, rel):
    """`rel` under a repository's execroot directory `root` ("" or external/x)."""
    if not root:
        return rel
    if rel == ".":
        return root
    return root + "/" + rel

def cc_grpc_proto(name, srcs, deps = [], grpc = True, **kwargs):
    """Generates C++ (and gRPC) code for `srcs` and wraps it in a cc_library.

    Packages live under proto/, which is the import root: a .proto imports
    "rpcguard/v1/options.proto", and C++ includes either
    "rpcguard/v1/options.pb.h" or "proto/rpcguard/v1/options.pb.h".

    Args:
      name: the cc_library's name.
      srcs: .proto files in this package; imports resolve from this
        repository's proto/ (or its root, outside proto/), rpcguard's proto/
        and /usr/include (for google/protobuf/*.proto). Works in rpcguard's
        workspace and from a workspace that uses rpcguard as a repository
        (deps = ["@rpcguard//proto/rpcguard/v1:options_proto"]).
      deps: other cc_grpc_proto targets whose protos these import.
      grpc: also run grpc_cpp_plugin (set False for message-only protos).
      **kwargs: passed on to the cc_library (visibility, testonly, ...).
    """
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    pkg = native.package_name()

    # The calling package's repository: rpcguard's own (main or external), or
    # a consumer's own .proto that imports rpcguard's options.
    repo = native.repository_name()
    root = "" if repo == "@" else "external/" + repo[1:]
    if pkg.startswith("proto/"):
        import_root = _path(root, "proto")
        rel = pkg[len("proto/"):]
    else:
        # Outside proto/ (examples/): imported by repo-relative path.
        import_root = _path(root, ".")
        rel = pkg
    out_root = _path("$(GENDIR)", import_root)
    plugin = ""
    if grpc:
        plugin = ("--plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin) " +
                  "--grpc_out=" + out_root + " ")
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = ("protoc -I" + import_root + " -I" +
               _path(_RPCGUARD_ROOT, "proto") + " -I/usr/include " +
               "--cpp_out=" + out_root + " " + plugin +
               " ".join([import_root + "/" + rel + "/" + s for s in srcs])),
        message = "protoc " + name,
    )
    native.filegroup(
        name = name + "_srcs",
        srcs = srcs + [d + "_srcs" for d in deps],
        visibility = kwargs.get("visibility"),
    )
    copts = RPCGUARD_COPTS + kwargs.pop("copts", [])
    native.cc_library(
        name = name,
        copts = copts,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + [Label("//proto:include_root"), "@rpcguard_system//:grpc"],
        **kwargs
    )
