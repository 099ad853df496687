// Copyright rpcguard authors.
//
// Runs a fuzzer's committed corpus (seeds and every crash ever found) through
// its LLVMFuzzerTestOneInput in the ordinary test suite, so a fixed crash
// stays fixed even where libFuzzer is not built.

#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

TEST(FuzzCorpusTest, EveryInputRunsCleanly) {
  const std::string dir = RPCGUARD_CORPUS_DIR;
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << dir;
  std::vector<std::string> files;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') files.push_back(dir + "/" + e->d_name);
  }
  closedir(d);
  ASSERT_FALSE(files.empty()) << "no corpus in " << dir;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string bytes = buf.str();
    EXPECT_EQ(LLVMFuzzerTestOneInput(
                  reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
              0)
        << f;
  }
}

}  // namespace
