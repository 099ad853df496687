// Copyright rpcguard authors.

#include "tests/testing/wall_clock_stepper.h"

#include <dirent.h>
#include <glob.h>
#include <grpc/support/time.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace rpcguard {
namespace testing {
namespace {

// Set in the re-executed process; names its offset file.
constexpr char kOffsetFileEnv[] = "FAKETIME_TIMESTAMP_FILE";
constexpr char kChildEnv[] = "RPCGUARD_UNDER_FAKETIME";

absl::Duration g_offset = absl::ZeroDuration();

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "wall_clock_stepper: %s\n", message.c_str());
  std::fflush(stderr);
  std::exit(1);
}

// The multi-threaded build: it serializes its own cached state, which the
// plain one shares unlocked between threads.
std::string FindLibfaketime() {
  if (const char* path = std::getenv("RPCGUARD_LIBFAKETIME")) return path;
  glob_t found;
  std::string path;
  if (glob("/usr/lib/*/faketime/libfaketimeMT.so.1", 0, nullptr, &found) == 0) {
    path = found.gl_pathv[0];
  }
  globfree(&found);
  return path;
}

// The kernel's clocks, by system call: libfaketime intercepts only libc's
// entry points.
absl::Time KernelClock(clockid_t id) {
  timespec ts;
  syscall(SYS_clock_gettime, id, &ts);
  return absl::TimeFromTimespec(ts);
}

void SetOrAppend(const char* name, const std::string& value, char sep) {
  const char* old = std::getenv(name);
  const std::string joined =
      old == nullptr || *old == '\0'
          ? value
          : absl::StrCat(old, std::string(1, sep), value);
  setenv(name, joined.c_str(), 1);
}

// libfaketime reads the file by name on every realtime read: a rename
// replaces it whole, where rewriting it in place could show a reader an
// empty file.
absl::Status WriteOffset(const std::string& file, absl::Duration offset) {
  const int64_t seconds = absl::ToInt64Seconds(offset);
  const std::string tmp = absl::StrCat(file, ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << (seconds < 0 ? "" : "+") << seconds << "\n";
    if (!out.good()) {
      return absl::InternalError(absl::StrCat("cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("rename to ", file, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

bool Shows(absl::Duration seen, absl::Duration want) {
  // Two clock reads a thread preemption apart (the machine is shared).
  return absl::AbsDuration(seen - want) < absl::Milliseconds(200);
}

}  // namespace

void RunUnderFaketimeOrDie(int argc, char** argv) {
  (void)argc;
  if (std::getenv(kChildEnv) != nullptr) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      if (absl::StrContains(line, "libfaketime")) return;
    }
    Die("re-executed, but libfaketime is not loaded (LD_PRELOAD ignored?)");
  }
  const std::string lib = FindLibfaketime();
  if (lib.empty() || access(lib.c_str(), R_OK) != 0) {
    Die(absl::StrCat(
        "libfaketime not found at ",
        lib.empty() ? "/usr/lib/*/faketime/libfaketimeMT.so.1" : lib,
        ": install Debian's `faketime` package (./bazelw installs it; or "
        "apt-get install faketime). This test steps the real wall clock "
        "and never skips."));
  }
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string file =
      absl::StrCat(dir != nullptr ? dir : "/tmp", "/wall_clock_offset.",
                   static_cast<long>(getpid()));
  if (absl::Status s = WriteOffset(file, absl::ZeroDuration()); !s.ok()) {
    Die(std::string(s.message()));
  }
  SetOrAppend("LD_PRELOAD", lib, ':');
  setenv(kOffsetFileEnv, file.c_str(), 1);
  setenv("FAKETIME_NO_CACHE", "1", 1);  // a step shows at the next read
  setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
  unsetenv("FAKETIME");  // it would take precedence over the file
  // Under ASan: its allocator reads CLOCK_MONOTONIC (for releasing memory
  // to the OS) with its lock held; libfaketime's first read initializes it
  // with dlsym, which allocates, and the process deadlocks. Without that
  // feature the allocator reads no clock. verify_asan_link_order: a runtime
  // linked as a shared library would refuse libfaketime loaded before it.
  // Both are ignored by a build without ASan.
  SetOrAppend("ASAN_OPTIONS",
              "allocator_release_to_os_interval_ms=-1:"
              "verify_asan_link_order=0",
              ':');
  setenv(kChildEnv, "1", 1);
  execv("/proc/self/exe", argv);
  Die(absl::StrCat("execv /proc/self/exe: ", std::strerror(errno)));
}

WallClockOffsets ObserveWallClocks() {
  WallClockOffsets o;
  const absl::Time kernel = KernelClock(CLOCK_REALTIME);
  o.system_clock = absl::FromChrono(std::chrono::system_clock::now()) - kernel;
  const gpr_timespec g = gpr_now(GPR_CLOCK_REALTIME);
  o.gpr_realtime =
      absl::FromUnixNanos(g.tv_sec * int64_t{1000000000} + g.tv_nsec) - kernel;
  o.absl_now = absl::Now() - kernel;
  const absl::Time mono = KernelClock(CLOCK_MONOTONIC);
  o.steady_clock = absl::FromUnixNanos(
                       std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now().time_since_epoch())
                           .count()) -
                   mono;
  return o;
}

namespace {

void Ignore(int) {}

// Interrupts every other thread's sleep, so that it reads the wall clock
// again. gRPC 1.51's callback-queue threads ("nexting" threads) nap between
// polls with gpr_sleep_until on the realtime clock, which loops on a
// relative nanosleep of (deadline - now): a thread that starts a nap just
// after a step back of an hour computes an hour-long nanosleep, which going
// back to the real time does not shorten, and it then holds up the queue's
// shutdown (a channel's or server's destruction) for that hour. Interrupted
// (EINTR), gpr_sleep_until computes the time left anew. A no-op handler
// with SA_RESTART: every other interrupted call resumes as if nothing
// happened.
void WakeSleepers() {
  static const bool installed = [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = Ignore;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGURG, &sa, nullptr) == 0;
  }();
  if (!installed) return;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return;
  const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  while (dirent* entry = readdir(tasks)) {
    const pid_t tid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (tid <= 0 || tid == self) continue;
    syscall(SYS_tgkill, getpid(), tid, SIGURG);
  }
  closedir(tasks);
}

}  // namespace

absl::Status StepWallClockTo(absl::Duration offset, absl::Duration timeout,
                             absl::Duration* took) {
  const char* file = std::getenv(kOffsetFileEnv);
  if (std::getenv(kChildEnv) == nullptr || file == nullptr) {
    return absl::FailedPreconditionError(
        "not under libfaketime: call RunUnderFaketimeOrDie in main()");
  }
  if (offset > absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "a positive offset makes every absolute realtime wait oversleep by "
        "it; step forward from a negative base to zero instead");
  }
  if (offset != absl::Seconds(absl::ToInt64Seconds(offset))) {
    // libfaketime parses fractions with the locale's decimal separator.
    return absl::InvalidArgumentError("whole seconds only");
  }
  const auto start = std::chrono::steady_clock::now();
  const auto limit = start + absl::ToChronoNanoseconds(timeout);
  if (absl::Status s = WriteOffset(file, offset); !s.ok()) return s;
  const bool forward = offset > g_offset;
  g_offset = offset;
  WallClockOffsets seen;
  while (true) {
    seen = ObserveWallClocks();
    if (Shows(seen.system_clock, offset) && Shows(seen.gpr_realtime, offset) &&
        Shows(seen.absl_now, offset)) {
      break;
    }
    if (std::chrono::steady_clock::now() > limit) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the wall clocks do not show ", absl::FormatDuration(offset),
          " after ", absl::FormatDuration(timeout), ": ", DebugString(seen)));
    }
    // Relative sleep (nanosleep): an absolute realtime wait would return
    // at once after a backward step.
    absl::SleepFor(absl::Milliseconds(1));
  }
  // A step forward ends the naps that an earlier step back stretched. More
  // than once: a thread that computed its nap before the step showed but was
  // switched out before it entered nanosleep misses a lone signal and sleeps
  // the hour (seen on a loaded machine); by the next round it is asleep.
  if (forward) {
    for (int round = 0; round < 25; ++round) {
      WakeSleepers();
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  if (!Shows(seen.steady_clock, absl::ZeroDuration())) {
    return absl::InternalError(absl::StrCat(
        "steady_clock moved with the wall clock: ", DebugString(seen)));
  }
  if (took != nullptr) {
    *took = absl::FromChrono(std::chrono::steady_clock::now() - start);
  }
  return absl::OkStatus();
}

absl::Duration WallClockOffset() { return g_offset; }

std::string DebugString(const WallClockOffsets& o) {
  return absl::StrCat("system_clock ", absl::FormatDuration(o.system_clock),
                      ", gpr_now(REALTIME) ",
                      absl::FormatDuration(o.gpr_realtime), ", absl::Now() ",
                      absl::FormatDuration(o.absl_now), ", steady_clock ",
                      absl::FormatDuration(o.steady_clock));
}

}  // namespace testing
}  // namespace rpcguard
