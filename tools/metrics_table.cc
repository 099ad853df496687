// Copyright rpcguard authors.
//
// metrics_table: prints docs/metrics.md's table of every metric, generated
// from the instrument list (rpcguard/observability/instruments.h). After
// changing the list:
//   ./bazelw run //tools:metrics_table
// and paste its output between the page's "generated" markers;
// //tests/unit/observability:instruments_test fails until the two agree.

#include <iostream>

#include "rpcguard/observability/instruments.h"

int main() {
  std::cout << rpcguard::InstrumentsMarkdownTable();
  return 0;
}
