"""rpcguard_fuzzer: a libFuzzer binary and a corpus regression test."""

def rpcguard_fuzzer(name, deps):
    """Declares <name>_fuzzer and <name>_corpus_test.

    <name>_fuzzer is built only with --config=fuzz (clang's libFuzzer):
      ./bazelw run --config=fuzz //tests/fuzz:<name>_fuzzer -- -max_total_time=60
    It reads and extends corpus/<name>/. <name>_corpus_test runs that corpus
    through the same code in the ordinary test suite.
    """
    native.cc_binary(
        name = name + "_fuzzer",
        srcs = [name + "_fuzzer.cc"],
        deps = deps,
        linkopts = ["-fsanitize=fuzzer"],
        # libFuzzer needs clang: `//...` under gcc must not build it.
        tags = ["manual"],
        args = ["tests/fuzz/corpus/" + name],
        data = native.glob(["corpus/" + name + "/**"]),
    )
    native.cc_test(
        name = name + "_corpus_test",
        srcs = [name + "_fuzzer.cc", "corpus_test.cc"],
        deps = deps + ["@rpcguard_system//:gtest_main"],
        data = native.glob(["corpus/" + name + "/**"]),
        local_defines = ['RPCGUARD_CORPUS_DIR=\\"tests/fuzz/corpus/' + name + '\\"'],
    )
