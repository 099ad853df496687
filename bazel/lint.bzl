"""rpcguard_lint_test: checks the retry declarations of .proto files in a build.

    load("@rpcguard//bazel:lint.bzl", "rpcguard_lint_test")

    rpcguard_lint_test(
        name = "payments_lint",
        protos = [":payments_proto"],    # cc_grpc_proto targets or .proto files
        config = "service_config.json",  # optional: the JSON config you deploy
    )

The test runs //tools:rpcguard_lint on a FileDescriptorSet made from the
protos (with their imports and source info, so problems have lines) and fails
when a unary RPC has no idempotency declaration from any source or a
declaration is malformed.
"""

def _quote(s):
    return "'" + s.replace("'", "'\\''") + "'"

def _import_root(f):
    """The -I directory `f` is imported from, as in cc_grpc_proto: the
    repository's proto/ for files under it, else the repository's root.
    Returns (directory, whether it is a proto/)."""

    # short_path: "pkg/x.proto", or "../repo/pkg/x.proto" in another repository.
    rel = f.short_path
    if rel.startswith("../"):
        rel = rel.split("/", 2)[2]
    prefix = f.path[:-len(rel)]  # "", or "external/repo/", "bazel-out/.../"
    if rel.startswith("proto/"):
        return (prefix + "proto", True)
    return (prefix[:-1] if prefix else ".", False)

def _descriptor_set_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".pb")
    protos = ctx.files.protos

    # proto/ roots first: "rpcguard/v1/options.proto" must be found there,
    # not as "proto/rpcguard/v1/options.proto" under a repository's root.
    proto_roots = []
    other_roots = []
    for f in protos:
        root, is_proto = _import_root(f)
        roots = proto_roots if is_proto else other_roots
        if root not in roots:
            roots.append(root)
    roots = proto_roots + other_roots
    args = ["-I" + r for r in roots] + [
        "-I/usr/include",
        "--include_imports",
        "--include_source_info",
        "--descriptor_set_out=" + out.path,
    ] + [f.path for f in protos]
    ctx.actions.run_shell(
        inputs = protos,
        outputs = [out],
        # The system protoc, as cc_grpc_proto uses.
        command = "protoc " + " ".join([_quote(a) for a in args]),
        use_default_shell_env = True,
        mnemonic = "RpcguardDescriptorSet",
        progress_message = "protoc --descriptor_set_out " + out.short_path,
    )
    # runfiles too: a test's `data` sees only those.
    return [DefaultInfo(
        files = depset([out]),
        runfiles = ctx.runfiles(files = [out]),
    )]

_descriptor_set = rule(
    implementation = _descriptor_set_impl,
    attrs = {"protos": attr.label_list(allow_files = [".proto"], mandatory = True)},
)

def _proto_files(label):
    """A cc_grpc_proto target's .proto files (its `<name>_srcs` filegroup,
    which holds its imports' too); a .proto file as it is."""
    if label.endswith(".proto"):
        return label
    if ":" not in label:
        label += ":" + label.split("/")[-1]
    return label + "_srcs"

def rpcguard_descriptor_set(name, protos, **kwargs):
    """`<name>.pb`: a FileDescriptorSet of `protos` and their imports, with
    source info (protoc --include_imports --include_source_info).

    Args:
      name: the target; its file is <name>.pb.
      protos: cc_grpc_proto targets or .proto files (imports resolve as
        cc_grpc_proto's do: from the repository's proto/ or root, and
        /usr/include).
      **kwargs: testonly, visibility, ...
    """
    _descriptor_set(name = name, protos = [_proto_files(p) for p in protos], **kwargs)

def _lint_test_impl(ctx):
    lint = ctx.executable._lint
    args = ["--strict"] if ctx.attr.strict else []
    inputs = [lint] + ctx.files.descriptor_sets
    if ctx.file.config:
        args += ["--config", ctx.file.config.short_path]
        inputs.append(ctx.file.config)
    args += [f.short_path for f in ctx.files.descriptor_sets]
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.write(
        script,
        "#!/bin/sh\nexec " + " ".join([_quote(a) for a in [lint.short_path] + args]) + "\n",
        is_executable = True,
    )
    runfiles = ctx.runfiles(files = inputs).merge(
        ctx.attr._lint[DefaultInfo].default_runfiles,
    )
    return [DefaultInfo(executable = script, runfiles = runfiles)]

_lint_test = rule(
    implementation = _lint_test_impl,
    test = True,
    attrs = {
        "descriptor_sets": attr.label_list(allow_files = [".pb"], mandatory = True),
        "config": attr.label(allow_single_file = True),
        "strict": attr.bool(default = True),
        "_lint": attr.label(
            default = Label("//tools:rpcguard_lint"),
            executable = True,
            cfg = "target",
        ),
    },
)

def rpcguard_lint_test(name, protos, config = None, strict = True, **kwargs):
    """A test that runs rpcguard_lint on `protos`.

    Declares <name>_descriptor_set (see rpcguard_descriptor_set) and the test
    <name>, which prints every RPC's policy and the source that decided it.

    Args:
      name: the test.
      protos: cc_grpc_proto targets or .proto files; every RPC of them and of
        the files they import is checked.
      config: a JSON config file (Config::FromJson's format) applied on top
        of the .proto options, as the program will run with it.
      strict: fail when a unary RPC has no idempotency declaration from any
        source or a declaration is malformed (rpcguard_lint --strict); False
        only prints.
      **kwargs: passed to the test (tags, size: "small" unless given, ...).
    """
    kwargs.setdefault("size", "small")
    rpcguard_descriptor_set(
        name = name + "_descriptor_set",
        protos = protos,
        testonly = True,
        visibility = ["//visibility:private"],
    )
    _lint_test(
        name = name,
        descriptor_sets = [name + "_descriptor_set"],
        config = config,
        strict = strict,
        **kwargs
    )
