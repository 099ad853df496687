"""cc_grpc_proto: compiles .proto files with the system protoc and
grpc_cpp_plugin (Bazel's native proto rules need @com_google_protobuf, which
cannot be fetched offline)."""

def cc_grpc_proto(name, srcs, deps = [], grpc = True, **kwargs):
    """Generates C++ (and gRPC) code for `srcs` and wraps it in a cc_library.

    Packages live under proto/, which is the import root: a .proto imports
    "rpcguard/v1/options.proto", and C++ includes either
    "rpcguard/v1/options.pb.h" or "proto/rpcguard/v1/options.pb.h".

    Args:
      name: the cc_library's name.
      srcs: .proto files in this package; imports resolve from proto/ and
        /usr/include (for google/protobuf/*.proto).
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
    if pkg.startswith("proto/"):
        import_root = "proto"
        rel = pkg[len("proto/"):]
        out_root = "$(GENDIR)/proto"
    else:
        # Outside proto/ (examples/): imported by repo-relative path.
        import_root = "."
        rel = pkg
        out_root = "$(GENDIR)"
    plugin = ""
    if grpc:
        plugin = ("--plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin) " +
                  "--grpc_out=" + out_root + " ")
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = ("protoc -I" + import_root + " -Iproto -I/usr/include " +
               "--cpp_out=" + out_root + " " + plugin +
               " ".join([import_root + "/" + rel + "/" + s for s in srcs])),
        message = "protoc " + name,
    )
    native.filegroup(
        name = name + "_srcs",
        srcs = srcs + [d + "_srcs" for d in deps],
        visibility = kwargs.get("visibility"),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//proto:include_root", "@system//:grpc"],
        **kwargs
    )
