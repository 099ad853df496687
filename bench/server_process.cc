// Copyright rpcguard authors.

#include "bench/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "tools/cpp/runfiles/runfiles.h"

namespace rpcguard {
namespace bench {
namespace {

constexpr char kListening[] = "listening on ";

// Servers still running, for the atexit handler.
absl::Mutex live_mu(absl::kConstInit);
std::set<pid_t>* live ABSL_GUARDED_BY(live_mu) = nullptr;

void KillLiveServers() {
  absl::MutexLock lock(&live_mu);
  if (live == nullptr) return;
  for (pid_t pid : *live) {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
  live->clear();
}

void AddLive(pid_t pid) {
  absl::MutexLock lock(&live_mu);
  if (live == nullptr) {
    live = new std::set<pid_t>;
    std::atexit(KillLiveServers);
  }
  live->insert(pid);
}

void RemoveLive(pid_t pid) {
  absl::MutexLock lock(&live_mu);
  if (live != nullptr) live->erase(pid);
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("wait status ", status);
}

// Waits for `pid` up to `timeout`; true with `*status` when it exited.
bool WaitFor(pid_t pid, absl::Duration timeout, int* status) {
  const absl::Time end = absl::Now() + timeout;
  while (true) {
    const pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) {
      *status = 0;
      return true;  // not our child any more
    }
    if (absl::Now() >= end) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& path, int port, absl::Duration timeout) {
  if (access(path.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("fault server not executable: ", path));
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  const pid_t parent = getpid();
  // Built before fork(): the child of a process with threads must not
  // allocate.
  std::string port_arg = absl::StrCat("--port=", port);
  std::vector<char*> argv = {const_cast<char*>(path.c_str()), port_arg.data(),
                             nullptr};
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    // The child: only async-signal-safe calls until exec.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the parent died before prctl
    if (dup2(fds[1], STDOUT_FILENO) < 0) _exit(1);
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  AddLive(pid);
  std::unique_ptr<ServerProcess> server(new ServerProcess(pid, fds[0]));

  // Read the first line: "listening on 127.0.0.1:PORT".
  std::string line;
  const absl::Time end = absl::Now() + timeout;
  while (line.find('\n') == std::string::npos) {
    const int left_ms = static_cast<int>(
        std::max<int64_t>(0, absl::ToInt64Milliseconds(end - absl::Now())));
    pollfd p = {fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, left_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "fault server (", path, ") did not say where it listens within ",
          absl::FormatDuration(timeout)));
    }
    char buf[256];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int status = 0;
      WaitFor(pid, absl::Seconds(2), &status);
      RemoveLive(pid);
      server->pid_ = -1;
      return absl::InternalError(
          absl::StrCat("fault server (", path,
                       ") exited before listening: ", DescribeExit(status)));
    }
    line.append(buf, n);
  }
  absl::string_view first(line.data(), line.find('\n'));
  if (!absl::ConsumePrefix(&first, kListening) || first.empty()) {
    return absl::InternalError(absl::StrCat("fault server said \"", first,
                                            "\", expected \"", kListening,
                                            "ADDRESS\""));
  }
  server->address_ = std::string(first);
  return server;
}

ServerProcess::~ServerProcess() { Stop().IgnoreError(); }

absl::Status ServerProcess::Stop() {
  if (pid_ <= 0) return absl::OkStatus();
  const pid_t pid = pid_;
  pid_ = -1;
  kill(pid, SIGTERM);
  int status = 0;
  if (!WaitFor(pid, absl::Seconds(10), &status)) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    RemoveLive(pid);
    close(stdout_fd_);
    return absl::DeadlineExceededError(
        "fault server ignored SIGTERM for 10 s; killed");
  }
  RemoveLive(pid);
  close(stdout_fd_);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("fault server ended with ", DescribeExit(status)));
}

void ServerProcess::Kill() {
  if (pid_ <= 0) return;
  const pid_t pid = pid_;
  pid_ = -1;
  kill(pid, SIGKILL);
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  RemoveLive(pid);
  close(stdout_fd_);
}

int64_t ServerProcess::RssKib() const {
  return pid_ > 0 ? ReadRssKib(pid_) : -1;
}

int64_t ReadRssKib(pid_t pid) {
  const std::string path =
      pid == 0 ? "/proc/self/status" : absl::StrCat("/proc/", pid, "/status");
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "VmRSS:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    absl::ConsumeSuffix(&rest, "kB");
    int64_t kib;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib)) return kib;
  }
  return -1;
}

std::string FindFaultServer(const char* argv0) {
  using ::bazel::tools::cpp::runfiles::Runfiles;
  std::string error;
  std::unique_ptr<Runfiles> runfiles(Runfiles::Create(argv0, &error));
  if (runfiles == nullptr) return "";
  std::string path =
      runfiles->Rlocation("rpcguard/tests/testing/fault_server_main");
  if (path.empty() || access(path.c_str(), X_OK) != 0) return "";
  return path;
}

}  // namespace bench
}  // namespace rpcguard
