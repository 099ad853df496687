// Copyright rpcguard authors.
//
// Steps the wall clock of the test process itself, forward and back, while
// the monotonic clock runs on untouched: libfaketime (Debian's `faketime`
// package, which ./bazelw installs) preloaded with
// FAKETIME_DONT_FAKE_MONOTONIC=1, its offset read from a file on every
// realtime read (FAKETIME_TIMESTAMP_FILE, FAKETIME_NO_CACHE=1).
//
// libfaketime fakes what the process reads, not the kernel: an absolute
// realtime wait handed to the kernel (absl's futex waits, and so every
// gpr_cv_wait of gRPC) is computed in the faked time and kept by the kernel
// in the real one. A positive offset makes every such wait oversleep by it;
// a negative one makes it return at once (early, which callers that recheck
// the clock survive, at the cost of spinning: gRPC's timer threads take
// about 1.7 cores then). So offsets are never positive, a forward step goes
// from a negative base to zero, and a test stays below zero briefly.
//
// A step back also stretches naps: gRPC 1.51's callback-queue threads nap
// with gpr_sleep_until on the realtime clock, and one that starts a nap
// after a step back of an hour sleeps an hour, which blocks the queue's
// shutdown. So a step forward (back to zero) interrupts every thread's sleep
// with a no-op signal (SIGURG), and the naps end as they should.

#ifndef RPCGUARD_TESTS_TESTING_WALL_CLOCK_STEPPER_H_
#define RPCGUARD_TESTS_TESTING_WALL_CLOCK_STEPPER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace rpcguard {
namespace testing {

// Call first in main(), before any thread starts. Unless this process
// already runs under libfaketime, re-executes it (/proc/self/exe, the same
// arguments) with libfaketime preloaded and an offset file at +0; returns
// only in that process. Exits with a message naming the package when
// libfaketime is not installed: a test of the real clock never skips.
void RunUnderFaketimeOrDie(int argc, char** argv);

// Each wall clock the process reads, as its offset from the kernel's real
// one (which libfaketime does not intercept).
struct WallClockOffsets {
  absl::Duration system_clock;  // std::chrono::system_clock::now()
  absl::Duration gpr_realtime;  // gpr_now(GPR_CLOCK_REALTIME)
  absl::Duration absl_now;      // absl::Now(), rpcguard's Clock::Real()
  absl::Duration steady_clock;  // steady_clock against CLOCK_MONOTONIC's
                                // own epoch: must stay zero
};

// Reads every clock once.
WallClockOffsets ObserveWallClocks();

// Sets the wall clock's offset from the real time to `offset` (whole
// seconds, never positive, see above) and waits until every wall clock of
// ObserveWallClocks shows it, up to `timeout`. absl::Now() interpolates
// between samples of the kernel clock with the cycle counter and so shows a
// step only at its next sample, up to about 2 s later; the others show it at
// once. `took`, when not null, is how long that wait was.
absl::Status StepWallClockTo(absl::Duration offset,
                             absl::Duration timeout = absl::Seconds(5),
                             absl::Duration* took = nullptr);

// The offset last set (zero at the start).
absl::Duration WallClockOffset();

std::string DebugString(const WallClockOffsets& offsets);

}  // namespace testing
}  // namespace rpcguard

#endif  // RPCGUARD_TESTS_TESTING_WALL_CLOCK_STEPPER_H_
