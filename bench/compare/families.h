// Copyright rpcguard authors.
//
// The scenario families of //bench:compare, one file each:
//   matrix.cc    every client through steady faults (none, 10%, 30%, an
//                outage, a slow server) x stub x callers;
//   outages.cc   what retries do to a server in trouble: a burst at start,
//                a restart, a brownout, an overload;
//   tails.cc     what hedging does to a latency tail and a slowdown;
//   streams.cc   streams retried until they commit: CPU per message without
//                faults, success when 30% of attempts fail first (issue 23);
//   backends.cc  three backends behind one target, one of them failing,
//                refusing connections or slow (issue 46 §3);
//   headline.cc  the no-failure path's client CPU per call (--headline);
//   soak.cc      RSS over many calls (--soak).
// The first five make up the default mode and share its report; the last
// two are modes of their own.

#ifndef RPCGUARD_BENCH_COMPARE_FAMILIES_H_
#define RPCGUARD_BENCH_COMPARE_FAMILIES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "bench/compare/common.h"
#include "bench/compare/report.h"

namespace rpcguard {
namespace bench {

// A family of the default mode: its scenarios that match --only, each
// measured for each of its clients.
class Family {
 public:
  virtual ~Family() = default;

  // How many scenarios matched --only.
  virtual size_t size() const = 0;
  virtual const std::vector<ClientKind>& clients() const = 0;
  // Measures every cell, with a line per cell on stderr.
  virtual absl::Status Run(const Env& env) = 0;
  // The paragraph above the table (ends with a newline); `took` is the
  // whole run's time.
  virtual std::string Preface(absl::Duration took) const = 0;
  // One row per cell.
  virtual std::vector<Row> Rows() const = 0;
  // What follows the table: the targets, where measured.
  virtual std::string Targets() const = 0;
  // The key of its rows in the JSON report.
  virtual const char* json_key() const = 0;
};

std::unique_ptr<Family> MatrixFamily(const Flags& flags, const Plan& plan);
std::unique_ptr<Family> OutageFamily(const Flags& flags, const Plan& plan);
std::unique_ptr<Family> TailFamily(const Flags& flags, const Plan& plan);
std::unique_ptr<Family> StreamFamily(const Flags& flags, const Plan& plan);
std::unique_ptr<Family> BackendFamily(const Flags& flags, const Plan& plan);

// The modes of their own; each returns the process's exit code.
int RunHeadline(const Flags& flags, const Env& env, const Machine& machine);
int RunSoak(const Flags& flags, const Env& env, ServerProcess& server,
            const Machine& machine);

}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_COMPARE_FAMILIES_H_
