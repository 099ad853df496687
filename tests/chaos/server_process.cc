// Copyright rpcguard authors.

#include "tests/chaos/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace rpcguard {
namespace testing {

ServerProcess::ServerProcess(std::string binary) : binary_(std::move(binary)) {}

ServerProcess::~ServerProcess() { Kill(); }

std::string ServerProcess::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

absl::Status ServerProcess::Start(int port, absl::Duration timeout) {
  if (running()) return absl::FailedPreconditionError("already running");
  // Everything the child needs is built before fork(): between fork and
  // exec a child of a multi-threaded process may only make
  // async-signal-safe calls (no allocation).
  const std::string port_flag = absl::StrCat("--port=", port);
  std::vector<char*> argv = {const_cast<char*>(binary_.c_str()),
                             const_cast<char*>(port_flag.c_str()), nullptr};
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // The child: dies with the thread that forked it, stdout to the pipe.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    dup2(fds[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the copy
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  pid_ = pid;
  stdout_fd_ = fds[0];

  // Wait for "listening on 127.0.0.1:PORT\n".
  std::string line;
  const absl::Time limit = absl::Now() + timeout;
  while (line.find('\n') == std::string::npos) {
    const absl::Duration left = limit - absl::Now();
    if (left <= absl::ZeroDuration()) {
      Kill();
      return absl::DeadlineExceededError(
          absl::StrCat(binary_, " did not say it listens within ",
                       absl::FormatDuration(timeout)));
    }
    pollfd p = {stdout_fd_, POLLIN, 0};
    const int n =
        poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[256];
    const ssize_t got = read(stdout_fd_, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      // EOF: it exited (e.g. the port is taken).
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
      close(stdout_fd_);
      stdout_fd_ = -1;
      return absl::UnavailableError(
          absl::StrCat(binary_, " --port=", port,
                       " exited before listening (status ", status, ")"));
    }
    line.append(buf, got);
  }
  line.resize(line.find('\n'));
  const absl::string_view prefix = "listening on 127.0.0.1:";
  int listening = 0;
  if (!absl::StartsWith(line, prefix) ||
      !absl::SimpleAtoi(absl::string_view(line).substr(prefix.size()),
                        &listening) ||
      (port != 0 && listening != port)) {
    Kill();
    return absl::InternalError(absl::StrCat("unexpected first line: ", line));
  }
  port_ = listening;
  return absl::OkStatus();
}

void ServerProcess::Kill() {
  if (!running()) return;
  kill(pid_, SIGKILL);
  Reap();
}

void ServerProcess::Stop(absl::Duration timeout) {
  if (!running()) return;
  kill(pid_, SIGTERM);
  const absl::Time limit = absl::Now() + timeout;
  while (absl::Now() < limit) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) {
      pid_ = -1;
      close(stdout_fd_);
      stdout_fd_ = -1;
      return;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  Kill();
}

void ServerProcess::Reap() {
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  if (stdout_fd_ >= 0) close(stdout_fd_);
  stdout_fd_ = -1;
}

std::string RunfilesPath(const std::string& workspace_relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  // Run by hand from the workspace root: the build output.
  if (srcdir == nullptr) return "bazel-bin/" + workspace_relative;
  return absl::StrCat(srcdir, "/",
                      workspace != nullptr ? workspace : "rpcguard", "/",
                      workspace_relative);
}

}  // namespace testing
}  // namespace rpcguard
